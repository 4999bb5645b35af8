"""The trainer's inference server never outlives the trainer (example_trainer.inference.server_lifetime): it dies with the
process that started it, and a server left by a trainer that is gone is stopped before a new one takes its
port, while a live trainer's server is never touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from atroposlib.testing.api_process import free_port
from atroposlib.utils.processes import stop_process
from example_trainer.inference.server_lifetime import ServerPidFile, bound_to_parent, process_start_time
from example_trainer.inference.vllm_manager import VllmManager, VllmManagerConfig, port_in_use

#: A parent that starts a long-running child the way the manager starts its server, prints the child's
#: pid and waits to be killed.
PARENT = """
import subprocess, sys, time
from example_trainer.inference.server_lifetime import bound_to_parent
cmd = [sys.executable, "-c", "import time; time.sleep(120)"]
child = subprocess.Popen(bound_to_parent(cmd), start_new_session=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def _wait_gone(pid: int, start: float, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_start_time(pid) != start:
            return True
        time.sleep(0.1)
    return False


def _dummy_server(port: int) -> subprocess.Popen:
    """A process in its own session listening on ``port`` (what an orphaned server looks like)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not port_in_use("127.0.0.1", port):
        assert proc.poll() is None and time.monotonic() < deadline, "the dummy server did not start"
        time.sleep(0.1)
    return proc


def _record(pid_file: ServerPidFile, server: subprocess.Popen, port: int, owner_pid: int) -> None:
    pid_file.path.parent.mkdir(parents=True, exist_ok=True)
    pid_file.path.write_text(
        json.dumps({
            "server_pid": server.pid, "server_start": process_start_time(server.pid),
            "owner_pid": owner_pid, "owner_start": process_start_time(owner_pid) or 1.0,
            "host": "127.0.0.1", "port": port,
        })
    )  # fmt: skip


def _gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_server_dies_with_the_process_that_started_it():
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        child = int(parent.stdout.readline())
        start = process_start_time(child)
        assert start is not None
        time.sleep(0.5)  # the child has exec'd its program
        os.killpg(parent.pid, signal.SIGKILL)  # the parent's group only: the child has its own session
        parent.wait(10)
        assert _wait_gone(child, start), "the child outlived the process that started it"
    finally:
        stop_process(parent, sig=signal.SIGKILL)


def test_the_launcher_keeps_the_command_and_its_pid(tmp_path):
    out = tmp_path / "pid"
    cmd = [sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(str(os.getpid()))"]
    proc = subprocess.Popen(bound_to_parent(cmd))
    assert proc.wait(30) == 0
    assert int(out.read_text()) == proc.pid  # exec'd in place: the caller's handle is the server's pid


def test_a_stale_server_whose_trainer_is_gone_is_stopped_before_a_new_one_starts(tmp_path, tiny_model_dir):
    port = free_port()
    stale = _dummy_server(port)
    try:
        cfg = VllmManagerConfig(
            backend="hf", vllm_port=port, log_dir=str(tmp_path / "logs"), watch_interval=None,
            stop_timeout=5, startup_timeout=120,
        )  # fmt: skip
        manager = VllmManager(cfg)
        _record(manager.pid_file, stale, port, owner_pid=_gone_pid())
        manager.start(str(tiny_model_dir))
        try:
            assert stale.wait(10) is not None  # the orphan was stopped ...
            assert manager.is_healthy()  # ... and the new server took its port
            recorded = manager.pid_file.read()
            assert recorded["server_pid"] == manager.pid and recorded["owner_pid"] == os.getpid()
        finally:
            manager.stop()
        assert manager.pid_file.read() is None  # a clean stop leaves no record
    finally:
        stop_process(stale, sig=signal.SIGKILL, process_group=True)


def test_a_live_trainers_server_is_left_alone(tmp_path):
    port = free_port()
    server = _dummy_server(port)
    try:
        pid_file = ServerPidFile(tmp_path / f"inference_{port}.pid")
        _record(pid_file, server, port, owner_pid=os.getpid())
        assert pid_file.stop_stale(timeout=2) is None
        assert server.poll() is None and port_in_use("127.0.0.1", port)
        # ... and a record of a server that is gone is simply dropped
        stop_process(server, process_group=True)
        assert pid_file.stop_stale(timeout=2) is None and pid_file.read() is None
    finally:
        stop_process(server, sig=signal.SIGKILL, process_group=True)
