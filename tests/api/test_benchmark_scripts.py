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


def throughput_figures(tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``api_throughput.py`` on this server alone with a small load; its output and JSON figures."""
    out = tmp_path / "figures.json"
    done = run_script(
        "benchmarks/api_throughput.py",
        "--skip-original",
        "--rounds", "1",
        "--json-out", str(out),
        *options,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done, json.loads(out.read_text())


def test_api_throughput_runs_and_reports(tmp_path):
    done, figures = throughput_figures(
        tmp_path,
        "--concurrency", "1,4",
        "--requests", "40",
        "--batches", "3",
        "--memory-groups", "16",
    )  # fmt: skip
    assert set(figures["ingest_req_per_s"]) == {"1", "4"}
    assert all(v["this"] > 0 for v in figures["ingest_req_per_s"].values())
    assert figures["batch_ms"]["p50"]["this"] > 0
    assert "ingest req/s (conc 4)" in done.stdout


def test_api_throughput_sends_logprobs_and_distillation_cubes(tmp_path):
    _, figures = throughput_figures(
        tmp_path,
        "--with-logprobs", "--with-distill",
        "--concurrency", "2",
        "--requests", "20",
        "--batches", "2",
        "--memory-groups", "8",
    )  # fmt: skip
    assert figures["settings"]["with_logprobs"] and figures["settings"]["with_distill"]
    assert figures["ingest_req_per_s"]["2"]["this"] > 0


def test_ingest_floor_runs_and_reports():
    done = run_script("benchmarks/ingest_floor.py", "--skip-original", "--requests", "60")
    assert done.returncode == 0, done.stderr[-2000:]
    for label in (
        "null ASGI app",
        "null httptools protocol",
        "ASGI request cycle",
        "inflate + check + encode",
        "queue it durably",
        "this:",
    ):
        assert label in done.stdout, done.stdout


def test_api_capacity_runs_and_reports(tmp_path):
    out = tmp_path / "capacity.json"
    done = run_script(
        "benchmarks/api_capacity.py",
        "--clients", "4", "--group-size", "4", "--seq-len", "64", "--batch-size", "16",
        "--duration", "2", "--warmup", "1", "--json-out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["accepted_seq_per_s"] > 0 and figures["served_seq_per_s"] > 0
    assert figures["queue_ms"]["p50"] > 0 and figures["rss_mib"]["peak"] > 0
    assert figures["errors"] == 0
    assert "queue latency ms" in done.stdout and "API RSS MiB" in done.stdout
