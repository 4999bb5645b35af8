"""``benchmarks/weight_refresh.py --hand-off`` runs end to end on the tiny model, every hand-off checked against
the trainer's weights (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_hand_off_benchmark_measures_every_mode_and_checks_each_hand_off(tmp_path):
    out = tmp_path / "hand_off.json"
    cmd = [
        sys.executable, "benchmarks/weight_refresh.py", "--hand-off", "--shapes", "tiny", "--repeats", "1",
        "--tiny-batch", "4", "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(out.read_text())
    assert row["shape"] == "tiny" and row["tokens_per_step"] == 4 * 128
    for mode in (
        "copy_floor",
        "checkpoint",
        "broadcast",
        "broadcast_sent",
        "broadcast_async_lost",
        "shared_lost",
    ):
        assert row[f"{mode}_s"] >= 0 and f"{mode}_pct_of_step" in row
    assert row["broadcast_sent_s"] <= row["broadcast_s"]
    assert row["max_logprob_diff"] < 1e-5 and row["shared_max_logprob_diff"] < 1e-5
    assert "shared_vllm lost" in done.stdout
