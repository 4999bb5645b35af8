"""The demo's command line, helpers and process handling (no model, no vLLM)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from atroposlib.utils.processes import ServiceProcess, still_running
from example_trainer.demo.config import DemoConfig, build_parser, config_from_argv, describe_error
from example_trainer.demo.reporting import format_final_line, prune_checkpoints, read_new_records
from tests.helpers.serve import wait_for

FINAL_LINE = re.compile(r"^held-out accuracy: \d\.\d\d -> \d\.\d\d \(\d+ steps, \d+ s\)$")


def test_final_line_format():
    line = format_final_line(0.3125, 0.578, 40, 411.6)
    assert line == "held-out accuracy: 0.31 -> 0.58 (40 steps, 412 s)"
    assert FINAL_LINE.match(line)


def test_flags_map_onto_config_fields():
    cfg = config_from_argv(
        [
            "--steps",
            "3",
            "--eval-size",
            "16",
            "--operations",
            "+",
            "-",
            "--sft-lr",
            "0.01",
            "--keep-checkpoints",
        ]
    )
    assert (cfg.steps, cfg.eval_size, cfg.operations, cfg.sft_lr) == (3, 16, ["+", "-"], 0.01)
    assert cfg.keep_checkpoints is True
    assert config_from_argv([]) == DemoConfig()
    flags = {a.dest for a in build_parser()._actions if a.dest != "help"}
    assert flags == set(DemoConfig.model_fields)


def test_task_settings_are_shared_by_every_part():
    cfg = DemoConfig(min_digits=1, max_digits=3, operations="+,-", seed=7, eval_size=50)
    assert cfg.task_settings() == {
        "min_digits": 1,
        "max_digits": 3,
        "operations": ["+", "-"],
        "seed": 7,
        "eval_size": 50,
    }


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(["--steps", "0"], "--steps"), (["--lr", "-1"], "--lr"), (["--operations", "/"], "--operations")],
)
def test_bad_values_name_the_flag(argv, flag):
    with pytest.raises(Exception) as info:
        config_from_argv(argv)
    assert describe_error(info.value).startswith(flag)


def test_bad_flag_value_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "example_trainer.demo", "--eval-size", "0", "--run-dir", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "python -m example_trainer.demo: error: --eval-size: Input should be greater than or equal to 1"
    ]
    assert proc.stdout == ""


def test_read_new_records_only_returns_complete_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_new_records(path, 0) == (0, [])
    path.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2')
    offset, records = read_new_records(path, 0)
    assert records == [{"step": 1}]
    with path.open("a") as fh:
        fh.write("}\n")
    offset, records = read_new_records(path, offset)
    assert records == [{"step": 2}]
    assert read_new_records(path, offset) == (offset, [])


def test_prune_checkpoints_keeps_recent_and_final(tmp_path):
    for name in ("step_1", "step_2", "step_3", "final_model", "step_x"):
        (tmp_path / name).mkdir()
    prune_checkpoints(tmp_path, keep_after=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final_model", "step_3", "step_x"]
    prune_checkpoints(tmp_path, keep_after=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final_model", "step_x"]


_PARENT = """
import subprocess, sys, time
# A grandchild in a session of its own, like the trainer's vLLM server.
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print("started", flush=True)
time.sleep(300)
"""

_STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(300)
"""


def test_stop_also_ends_a_descendant_in_another_session(tmp_path):
    svc = ServiceProcess("parent", [sys.executable, "-c", _PARENT], tmp_path / "parent.log").start()
    try:
        wait_for(lambda: "started" in svc.tail().splitlines()[1:], 30, what="the parent to start")

        def found_child():
            svc.record_descendants()
            return bool(svc.descendants)

        wait_for(found_child, 30, what="the descendant")
        known = svc.known_processes()
        assert svc.pid in known and len(known) == 2
        assert all(still_running(pid, t) for pid, t in known.items())
    finally:
        svc.stop(timeout=10)
    assert svc.stop_requested and not svc.alive()
    wait_for(
        lambda: not any(still_running(pid, t) for pid, t in known.items()), 15, what="every process to end"
    )
    assert svc.tail().splitlines()[0].startswith("$ ")  # the command line heads the log


def test_stop_escalates_to_sigkill(tmp_path):
    svc = ServiceProcess("stubborn", [sys.executable, "-c", _STUBBORN], tmp_path / "s.log").start()
    wait_for(lambda: "ready" in svc.tail().splitlines()[1:], 30, what="the service to be ready")
    start = time.monotonic()
    code = svc.stop(timeout=1)
    assert code == -9
    assert time.monotonic() - start < 20
