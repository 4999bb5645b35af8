"""atropos-sft-gen / atropos-dpo-gen: inputs are checked before a progress bar is drawn, and a run that
writes nothing says so without a "wrote 0 records" line."""

from __future__ import annotations

import pytest

from tests.helpers.cli_tools import free_port_url, run_tool


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]


@pytest.mark.parametrize("tool", ["sft", "dpo"])
def test_bad_inputs_are_one_line_without_a_progress_bar(tool, tmp_path):
    out = tmp_path / "o.jsonl"
    missing = run_tool(tool, out, "--input", tmp_path / "missing.jsonl", "--save-messages")
    unreachable = run_tool(tool, out, "--api-url", free_port_url(), "--save-messages", timeout=60)
    for proc, needle in ((missing, "does not exist"), (unreachable, "cannot reach the trajectory API")):
        assert proc.returncode == 1
        lines = _lines(proc.stderr)
        assert len(lines) == 1 and needle in lines[0], proc.stderr
        assert "rec/s" not in proc.stderr and "%|" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("tool", ["sft", "dpo"])
def test_nothing_written_is_not_reported_as_written(tool, tmp_path, process_jsonl, tiny_model_dir):
    out = tmp_path / "o.jsonl"
    proc = run_tool(
        tool,
        out,
        "--input",
        process_jsonl,
        "--tokenizer",
        tiny_model_dir,
        "--minimum-score-diff-max-min",
        "99",
    )
    assert proc.returncode == 1
    assert "nothing written" in proc.stderr and "wrote" not in proc.stderr
    assert not out.exists()
