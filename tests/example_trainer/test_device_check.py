"""The device check's own path on a CPU (scripts/device_check.sh --device cpu): the tiny shape, shared_vllm for
two steps, with the repo's hf inference server; every refresh's logprob check must agree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from example_trainer.demo.device_check import MODES, QWEN25_05B, build_parser, format_line

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_cpu_smoke_run_trains_and_checks_every_refresh(tmp_path):
    run = tmp_path / "run"
    cmd = [
        "bash", str(REPO / "scripts" / "device_check.sh"), "--device", "cpu", "--shape", "tiny", "--steps", "2",
        "--modes", "shared_vllm", "--backend", "hf", "--batch-size", "16", "--micro-batch", "8",
        "--sft-steps", "5", "--run-dir", str(run),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "hf" and [m["mode"] for m in summary["modes"]] == ["shared_vllm"]
    for mode in summary["modes"]:
        assert mode["ok"] and mode["steps"] == 2 and mode["checks"] == 2
        assert mode["logprob_max_abs_diff"] < 1e-5
    assert "=== device check summary" in proc.stdout


def test_the_real_shape_and_the_modes():
    assert QWEN25_05B["hidden_size"] == 896 and QWEN25_05B["num_hidden_layers"] == 24
    assert set(MODES) == {"none-reload", "none-broadcast", "shared_vllm", "lora_only"}
    args = build_parser().parse_args(["--modes", "lora_only", "--steps", "3"])
    assert args.modes == ["lora_only"] and args.steps == "3"
    line = format_line({"mode": "lora_only", "ok": False, "error": "boom", "checks": 0})
    assert "FAILED" in line and "boom" in line
