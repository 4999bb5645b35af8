"""README's "CPU-only path" runs as written: its commands are read from README.md and executed in order
(see ``tests/docs/shell_blocks.py``), from a temporary directory with ``environments/`` linked in."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import requests

from atroposlib.testing.api_process import free_port
from atroposlib.utils.processes import wait_until_ok
from tests.docs.shell_blocks import REPO, BlockRun, block_commands
from tests.helpers.cli_runs import read_jsonl

SECTION = "## CPU-only path"
README_PORTS = (9001, 8000, 7860)  # inference server, trajectory API, viewer


def readme_commands():
    return block_commands((REPO / "README.md").read_text(), SECTION)


def test_section_parses_into_every_command():
    commands = readme_commands()
    assert commands[0].text.startswith("MODEL=$(python -m atroposlib.testing.tiny_model")
    used = " ".join(c.text for c in commands)
    for needed in (
        "atroposlib.testing.scripted_server",
        "arithmetic_server.py process",
        "run-api",
        "arithmetic_server.py serve",
        "view-run",
        "atropos-sft-gen",
    ):
        assert needed in used, needed
    assert [c.text.split()[0] for c in commands if c.background] == [
        "python",
        "run-api",
        "python",
        "view-run",
    ]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's block waits for the API with curl")
def test_readme_cpu_path_runs_as_written(tmp_path):
    ports = {old: free_port() for old in README_PORTS}
    (tmp_path / "environments").symlink_to(REPO / "environments")
    run = BlockRun(tmp_path, ports)
    try:
        run.run(readme_commands())

        model_dir = Path(run.env["MODEL"])
        assert (model_dir / "tokenizer.json").exists() and (model_dir / "config.json").exists()

        groups = read_jsonl(tmp_path / "runs/cpu/arithmetic.jsonl")
        assert len(groups) == 4
        for group in groups:
            assert set(group["scores"]) == {0.0, 1.0}  # half right, half wrong
            assert len(group["tokens"]) == len(group["masks"]) == len(group["scores"])
        assert (tmp_path / "runs/cpu/arithmetic.html").exists()

        records = read_jsonl(tmp_path / "runs/cpu/sft.jsonl")
        assert len(records) >= 8
        assert all(r["score"] > 0 for r in records)
        for record in records:
            question = re.search(r"What is (\d+)([+-])(\d+)\?", record["prefix"])
            a, op, b = int(question.group(1)), question.group(2), int(question.group(3))
            assert record["completion"].startswith(str(a + b if op == "+" else a - b))

        scripted, api, serve, viewer = run.background
        assert f"listening on http://127.0.0.1:{ports[9001]}/v1" in scripted.output()
        wait_until_ok(
            viewer.proc,
            f"http://127.0.0.1:{ports[7860]}/",
            name="view-run",
            timeout=240,
            log_tail=viewer.output,
        )
        envs = requests.get(f"http://127.0.0.1:{ports[8000]}/inspect/envs", timeout=10).json()
        assert [e["desired_name"] for e in envs["envs"]] == ["arithmetic"]
        assert serve.proc.poll() is None, serve.output()[-3000:]
    finally:
        run.stop()
    assert "stopped:" in serve.output()  # serve shut down cleanly on SIGTERM
