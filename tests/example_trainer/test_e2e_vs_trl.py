"""benchmarks/e2e_vs_trl.py: its bookkeeping, its message without TRL, and one tiny run of both sides."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "e2e_vs_trl.py"


def _bench():
    if "e2e_vs_trl" not in sys.modules:
        spec = importlib.util.spec_from_file_location("e2e_vs_trl", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["e2e_vs_trl"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["e2e_vs_trl"]


def _run(bench, side, points):
    return bench.RunResult(
        side=side, round=0, train_s=30.0, steps=60, sequences_generated=6000, sequences_trained=3000,
        startup_s=1.0, snapshots=[bench.Snapshot(t, 0, "x", acc) for t, acc in points],
    )  # fmt: skip


def test_times_and_accuracies_from_snapshots():
    bench = _bench()
    run = _run(bench, "ours", [(0.0, 0.1), (9.5, 0.46), (19.0, 0.44), (29.0, 0.52)])
    assert run.time_to(0.45) == 9.5
    assert run.time_to(0.50) == 29.0
    assert run.time_to(0.60) is None
    assert run.accuracy_at(9.5) == pytest.approx(0.46)
    assert run.accuracy_at(14.25) == pytest.approx(0.45)  # halfway between 9.5 s and 19 s
    assert run.accuracy_at(40) == 0.52  # after the last snapshot
    assert run.accuracy_at(0) == 0.1
    assert run.steps_per_min == 120.0
    assert run.generated_per_s == 200.0 and run.trained_per_s == 100.0


def test_median_time_counts_never_as_infinitely_late():
    bench = _bench()
    runs = [
        _run(bench, "trl", [(0.0, 0.1), (10.0, 0.5)]),
        _run(bench, "trl", [(0.0, 0.1), (20.0, 0.5)]),
        _run(bench, "trl", [(0.0, 0.1)]),
    ]
    assert bench._median_time(runs, 0.5) == 20.0
    assert bench._median_time(runs[1:], 0.5) is None
    assert bench._median_time(runs[:2], 0.5) == 15.0


def test_without_trl_one_line_and_exit_2():
    code = (
        "import runpy, sys; sys.modules['trl'] = None; "
        f"sys.argv = [{str(SCRIPT)!r}, '--quick']; runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "benchmarks/e2e_vs_trl.py: TRL is not installed (pip install trl); it is the other side of this benchmark"
    ]


def test_bad_flags_exit_2():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--duration", "0"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "--duration must be > 0" in proc.stderr


@pytest.mark.slow
def test_tiny_run_of_both_sides(tmp_path):
    pytest.importorskip("trl", reason="TRL is the other side of the benchmark (pip install trl)")
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--duration", "8", "--eval-every", "4", "--eval-size", "20",
            "--sft-steps", "5", "--levels", "0.5", "--cache-dir", str(tmp_path / "cache"), "--json", str(out),
        ],
        capture_output=True, text=True, timeout=500, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "s to accuracy 0.500" in proc.stdout and "steps/min" in proc.stdout
    result = json.loads(out.read_text())
    sides = {run["side"]: run for run in result["runs"]}
    assert set(sides) == {"ours", "trl"}
    for run in sides.values():
        assert run["train_s"] >= 8
        assert all(snap["accuracy"] is not None for snap in run["snapshots"])
        assert run["snapshots"][0]["t"] == 0.0
    # TRL trains on every group. Ours drops groups whose scores are all equal, which with a 5-step warm start
    # (accuracy 0) is every group, so it may not complete a step in 8 s; its services did start and stop.
    assert sides["trl"]["steps"] >= 1
    assert sides["ours"]["startup_s"] > 0
    assert result["summary"]["steps/min"]["trl"] > 0
