"""atropos-sft-gen / atropos-dpo-gen against a real run-api: read-only by default, --consume on request."""

from __future__ import annotations

import time

import pytest
import requests

from atroposlib.testing.api_process import launch_api
from tests.helpers.cli_runs import read_jsonl
from tests.helpers.cli_tools import LiveRun, ToolProcess, fixture_groups, run_tool


@pytest.fixture
def live(api, tiny_tokenizer):
    """A started run: trainer registered, envs arith_0 (id 0) and story_0 (id 1), three groups queued."""
    run = LiveRun(api)
    run.register_trainer(batch_size=64)
    env_ids = {"arith": run.register_env("arith", 4), "story": run.register_env("story", 4)}
    run.groups = fixture_groups(tiny_tokenizer, env_ids)
    for _, group in run.groups:
        assert run.post("/scored_data", group)["status"] == "received"
    return run


def test_sft_reads_a_live_run_without_touching_it(tmp_path, live, tiny_model_dir):
    before = live.snapshot()
    assert before["status"]["queue_size"] == 3
    out = tmp_path / "sft.jsonl"
    proc = run_tool(
        "sft", out, "--api-url", live.url, "--tokenizer", tiny_model_dir, "--num-seqs-to-save", "7"
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["score"] for r in read_jsonl(out)] == [1.0, 0.5, 1.0, 1.0, 0.8, 0.9, 0.7]
    assert live.snapshot() == before


def test_dpo_reads_a_live_run_deterministically(tmp_path, live):
    before = live.snapshot()
    outs = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.jsonl"
        args = (
            "--api-url",
            live.url,
            "--save-messages",
            "--seed",
            "5",
            "--idle-timeout",
            "1",
            "--poll-interval",
            "0.2",
        )
        proc = run_tool("dpo", out, *args, "--num-seqs-to-save", "0")
        assert proc.returncode == 0, proc.stderr
        assert "no new groups for 1 s" in proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    rows = read_jsonl(tmp_path / "a.jsonl")
    assert len(rows) == 5  # 2 pairs from group 1, 1 from group 2 (1.0 vs 0.0), 2 from group 3
    assert all(set(r) == {"pos", "score", "neg"} for r in rows)
    assert live.snapshot() == before


def test_groups_arriving_while_reading_are_taken_once(tmp_path, live, tiny_tokenizer):
    out = tmp_path / "stream.jsonl"
    args = [
        "--api-url",
        live.url,
        "--save-messages",
        "--allow-negative-scores",
        "--save-top-n-per-group",
        "4",
    ]
    args += ["--num-seqs-to-save", "0", "--idle-timeout", "4", "--poll-interval", "0.2"]
    tool = ToolProcess("sft", [out, *args], tmp_path / "sft.log")
    try:
        deadline = time.monotonic() + 60
        while not out.exists() or len(read_jsonl(out)) < 12:
            assert time.monotonic() < deadline, tool.log()
            time.sleep(0.1)
        for _, group in live.groups[:2]:  # the same content again: new groups, new seq numbers
            live.post("/scored_data", group)
        assert tool.proc.wait(60) == 0, tool.log()
    finally:
        tool.stop()
    rows = read_jsonl(out)
    assert len(rows) == 12 + 8  # every group exactly once: 3 + 2 groups of 4 sequences
    assert live.get("/status")["queue_size"] == 5


def test_only_new_and_env_filter(tmp_path, live):
    out = tmp_path / "story.jsonl"
    proc = run_tool(
        "sft", out, "--api-url", live.url, "--save-messages", "--env-id", "1", "--idle-timeout", "1"
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["score"] for r in read_jsonl(out)] == [0.9, 0.7]
    out2 = tmp_path / "new.jsonl"
    proc = run_tool(
        "sft", out2, "--api-url", live.url, "--save-messages", "--only-new", "--idle-timeout", "1"
    )
    assert proc.returncode == 1  # nothing arrived after the start
    assert "no usable groups" in proc.stderr and not out2.exists()


def test_consume_takes_batches_and_acknowledges_them(tmp_path, api, tiny_tokenizer):
    run = LiveRun(api)
    run.register_trainer(batch_size=8)
    env_id = run.register_env("arith", 4)
    for _, group in fixture_groups(tiny_tokenizer, {"arith": env_id, "story": env_id})[:2]:
        run.post("/scored_data", group)
    out = tmp_path / "consumed.jsonl"
    proc = run_tool(
        "sft", out, "--api-url", run.url, "--consume", "--save-messages", "--num-seqs-to-save", "1"
    )
    assert proc.returncode == 0, proc.stderr
    assert len(read_jsonl(out)) == 5  # the whole batch (2 groups) is written, though 1 record was asked
    assert run.get("/status") == {"current_step": 1, "queue_size": 0}
    assert run.post("/batch/replay", {})["batches"] == 0  # acknowledged: nothing to replay to the trainer


def test_consume_without_a_trainer_says_what_to_do(tmp_path, api):
    proc = run_tool("sft", tmp_path / "o.jsonl", "--api-url", api.url, "--consume", "--save-messages")
    assert proc.returncode == 1
    assert "Trainer not registered" in proc.stderr and "--register" in proc.stderr


def test_consume_with_register_registers_like_the_original(tmp_path, api):
    args = ("--api-url", api.url, "--consume", "--register", "--save-messages", "--idle-timeout", "1")
    proc = run_tool("dpo", tmp_path / "o.jsonl", *args, "--group-size", "4")
    assert proc.returncode == 1 and "no usable groups" in proc.stderr
    assert requests.get(api.url + "/info", timeout=5).json()["batch_size"] == 32
    assert requests.get(api.url + "/wandb_info", timeout=5).json() == {"group": "test", "project": "test"}


def test_api_key_is_sent_and_a_missing_key_is_explained(tmp_path, tiny_tokenizer):
    with launch_api(data_dir=tmp_path / "api", api_key="s3cret") as api:
        run = LiveRun(api)
        run.register_trainer()
        env_id = run.register_env("arith", 4)
        run.post("/scored_data", fixture_groups(tiny_tokenizer, {"arith": env_id})[0][1])
        before = run.snapshot()
        proc = run_tool(
            "sft", tmp_path / "a.jsonl", "--api-url", api.url, "--save-messages", "--num-seqs-to-save", "1"
        )
        assert proc.returncode == 1 and "--api-key" in proc.stderr and "ATROPOS_API_KEY" in proc.stderr
        proc = run_tool(
            "sft", tmp_path / "b.jsonl", "--api-url", api.url, "--save-messages", "--num-seqs-to-save", "1",
            env={"ATROPOS_API_KEY": "s3cret"},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        proc = run_tool(
            "sft", tmp_path / "c.jsonl", "--api-url", api.url, "--save-messages", "--num-seqs-to-save", "1",
            "--api-key", "s3cret",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert run.snapshot() == before
