"""The API benchmark scripts run end to end (on this server only; no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def test_api_throughput_runs_and_reports(tmp_path):
    out = tmp_path / "figures.json"
    done = run_script(
        "benchmarks/api_throughput.py",
        "--skip-original",
        "--concurrency", "1,4",
        "--rounds", "1",
        "--requests", "40",
        "--batches", "3",
        "--memory-groups", "16",
        "--json-out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert set(figures["ingest_req_per_s"]) == {"1", "4"}
    assert all(v["this"] > 0 for v in figures["ingest_req_per_s"].values())
    assert figures["batch_ms"]["p50"]["this"] > 0
    assert "ingest req/s (conc 4)" in done.stdout


def test_api_throughput_sends_logprobs_and_distillation_cubes(tmp_path):
    out = tmp_path / "figures.json"
    done = run_script(
        "benchmarks/api_throughput.py",
        "--skip-original", "--with-logprobs", "--with-distill",
        "--concurrency", "2",
        "--rounds", "1",
        "--requests", "20",
        "--batches", "2",
        "--memory-groups", "8",
        "--json-out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["settings"]["with_logprobs"] and figures["settings"]["with_distill"]
    assert figures["ingest_req_per_s"]["2"]["this"] > 0


def test_ingest_floor_runs_and_reports():
    done = run_script("benchmarks/ingest_floor.py", "--skip-original", "--requests", "60")
    assert done.returncode == 0, done.stderr[-2000:]
    for label in ("null ASGI app", "inflate + check + encode", "queue it durably", "this:"):
        assert label in done.stdout, done.stdout
