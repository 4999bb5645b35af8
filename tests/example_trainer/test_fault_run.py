"""The fault-injection run (benchmarks/faults.py): the real loop on CPU (run-api with its durable store, two
environments, the trainer and its hf inference server), with each part killed or stopped mid-run; every check of
its table must hold, the inference server's move to a new port (environments following the trainer's servers
file) included."""

from __future__ import annotations

import pytest

from benchmarks.faults import run_faults

pytestmark = pytest.mark.slow


def test_the_loop_survives_each_part_dying(tmp_path):
    report = run_faults(tmp_path, steps=40, stop_seconds=15.0)
    print(report.table())
    assert [f.name for f in report.faults] == [
        "env_kill",
        "inference_move",
        "inference_kill",
        "trainer_kill",
        "api_kill",
        "env_stop",
    ]
    failed = {name: detail for name, (ok, detail) in report.checks.items() if not ok}
    assert not failed, report.table()
    for fault in report.faults[:4]:  # each part came back and training went on after it
        assert fault.recovery_s is not None, report.table()
