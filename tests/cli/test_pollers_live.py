"""The read-only pollers against a real run-api: each group once, gaps reported, nothing changed."""

from __future__ import annotations

import signal
import time

from atroposlib.cli._tooling.client import ApiClient
from atroposlib.cli._tooling.sources import InspectPoller, LatestExamplePoller
from tests.helpers.cli_runs import read_jsonl
from tests.helpers.cli_tools import LiveRun, ToolProcess, fixture_groups, run_tool


def _post(run: LiveRun, group: dict, n: int) -> None:
    for _ in range(n):
        run.post("/scored_data", group)


def test_inspect_poller_dedups_and_counts_missed_groups(api, tiny_tokenizer):
    run = LiveRun(api)
    run.register_trainer()
    env_id = run.register_env("arith", 4)
    group = fixture_groups(tiny_tokenizer, {"arith": env_id, "story": env_id})[0][1]
    _post(run, group, 5)
    before = run.snapshot()
    with ApiClient(api.url) as client:
        poller = InspectPoller(client, limit=2)
        first = poller.poll()
        assert [r.seq for r in first.records] == [4, 5]  # the newest 2, oldest first
        assert first.missed == 0 and first.current_step == 0
        assert first.records[0].env_name == "arith_0" and first.records[0].step == 0
        assert poller.poll().records == []  # nothing new, nothing repeated
        assert run.snapshot() == before
        _post(run, group, 5)
        later = poller.poll()
        assert [r.seq for r in later.records] == [9, 10]
        assert later.missed == 3  # seqs 6..8 left the window of 2 between polls

        latest = LatestExamplePoller(client)
        assert len(latest.poll().records) == 1
        assert latest.poll().records == []


def test_sigterm_keeps_what_was_written(tmp_path, api, tiny_tokenizer):
    run = LiveRun(api)
    run.register_trainer()
    env_id = run.register_env("arith", 4)
    _post(run, fixture_groups(tiny_tokenizer, {"arith": env_id, "story": env_id})[0][1], 2)
    out = tmp_path / "partial.jsonl"
    tool = ToolProcess("sft", [out, "--api-url", api.url, "--save-messages"], tmp_path / "sft.log")
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and len(read_jsonl(out)) == 4):
            assert time.monotonic() < deadline, tool.log()
            time.sleep(0.1)
        assert tool.stop(signal.SIGTERM) == 0  # it was waiting for 100 records
    finally:
        tool.stop(signal.SIGKILL)
    assert "wrote 4 records from 2 groups" in tool.log() and "Traceback" not in tool.log()


def test_reset_only_when_asked(tmp_path, api, tiny_tokenizer):
    run = LiveRun(api)
    run.register_trainer(batch_size=16)
    env_id = run.register_env("arith", 4)
    _post(run, fixture_groups(tiny_tokenizer, {"arith": env_id, "story": env_id})[0][1], 1)
    proc = run_tool(
        "sft",
        tmp_path / "a.jsonl",
        "--api-url",
        api.url,
        "--save-messages",
        "--reset",
        "--only-new",
        "--idle-timeout",
        "0.5",
    )
    assert proc.returncode == 1 and "reset: Reset successful" in proc.stderr
    assert run.get("/info")["batch_size"] == -1 and run.get("/status") == {"current_step": 0, "queue_size": 0}
