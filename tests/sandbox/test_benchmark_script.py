"""benchmarks/sandbox_throughput.py runs end to end in a tiny configuration (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sandbox_throughput_runs_and_reports(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/sandbox_throughput.py",
            "--programs",
            "3",
            "--parallel",
            "2",
            "--rounds",
            "1",
            "--json-out",
            str(out),
        ],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert set(figures["programs_per_s"]) == {"plain_seq", "sandbox_seq", "plain_par", "sandbox_par"}
    assert all(value > 0 for value in figures["programs_per_s"].values())
    assert figures["ratio_sequential"] > 0 and figures["settings"]["parallel"] == 2
    assert "added per program" in done.stdout and "2 at once" in done.stdout
