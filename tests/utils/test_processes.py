"""The process supervisor (atroposlib.utils.processes) on real child processes."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from atroposlib.testing.api_process import free_port
from atroposlib.utils.processes import (
    ServiceNotReady,
    ServiceProcess,
    process_create_time,
    read_tail,
    start_service,
    still_running,
    stop_process,
    wait_until_ok,
)

_IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(300)
"""

_SLEEPER = "import time; print('ready', flush=True); time.sleep(300)"


def _wait_for_line(path, line, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if line in read_tail(path, 100).splitlines():
            return
        time.sleep(0.05)
    raise AssertionError(f"{line!r} never appeared in {path}:\n{read_tail(path)}")


def test_start_service_runs_in_its_own_group_and_logs_the_command(tmp_path):
    log = tmp_path / "sub" / "svc.log"
    proc = start_service(
        [sys.executable, "-c", "import os; print(os.environ['MARK'], flush=True)"],
        log,
        env={**os.environ, "MARK": "marked"},
        shown=["my-service", "--flag"],
    )
    assert proc.wait(30) == 0
    assert os.getpgid(os.getpid()) != proc.pid  # a new session: the child leads its own group
    assert log.read_text().splitlines() == ["$ my-service --flag", "marked"]


def test_a_service_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    log = tmp_path / "stubborn.log"
    proc = start_service([sys.executable, "-c", _IGNORES_SIGTERM], log)
    _wait_for_line(log, "ready")
    assert stop_process(proc, timeout=0.5, process_group=True) == -signal.SIGKILL
    assert proc.poll() == -signal.SIGKILL


def test_a_service_that_honours_sigterm_exits_on_it(tmp_path):
    log = tmp_path / "polite.log"
    proc = start_service([sys.executable, "-c", _SLEEPER], log)
    _wait_for_line(log, "ready")
    assert stop_process(proc, timeout=30, process_group=True) == -signal.SIGTERM


def test_service_process_stop_escalates_to_sigkill(tmp_path):
    svc = ServiceProcess("stubborn", [sys.executable, "-c", _IGNORES_SIGTERM], tmp_path / "s.log").start()
    _wait_for_line(svc.log_path, "ready")
    assert svc.stop(timeout=0.5) == -signal.SIGKILL
    assert svc.stop_requested and not svc.alive()


def test_stop_signals_only_the_services_own_process_group(tmp_path):
    # The target starts a worker in its own group (killed with it); a bystander service is left alone.
    spawner = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {_SLEEPER!r}])\n"
        "print('ready', flush=True); time.sleep(300)\n"
    )
    target = ServiceProcess("target", [sys.executable, "-c", spawner], tmp_path / "t.log").start()
    bystander = ServiceProcess("bystander", [sys.executable, "-c", _SLEEPER], tmp_path / "b.log").start()
    try:
        _wait_for_line(target.log_path, "ready")
        _wait_for_line(bystander.log_path, "ready")
        deadline = time.monotonic() + 30
        while not target.descendants and time.monotonic() < deadline:
            target.record_descendants()
            time.sleep(0.05)
        ((worker_pid, worker_started),) = target.descendants.items()
        assert os.getpgid(worker_pid) == target.pid
        target.stop(timeout=10)
        deadline = time.monotonic() + 15
        while still_running(worker_pid, worker_started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not still_running(worker_pid, worker_started)
        assert bystander.alive()
        assert still_running(os.getpid(), process_create_time(os.getpid()))
    finally:
        bystander.stop(timeout=10)
        target.stop(timeout=10)


def test_a_service_that_exits_early_fails_the_wait_with_its_log_tail(tmp_path):
    script = "import sys; print('loading the model', flush=True); print('fatal: no such model', flush=True); sys.exit(3)"
    svc = ServiceProcess("model-server", [sys.executable, "-c", script], tmp_path / "m.log").start()
    with pytest.raises(ServiceNotReady) as info:
        svc.wait_ready(f"http://127.0.0.1:{free_port()}/health", timeout=60, interval=0.05)
    assert info.value.returncode == 3
    message = str(info.value)
    assert message.startswith("model-server exited with 3:")
    assert "fatal: no such model" in message and "loading the model" in message


def test_a_service_that_never_answers_times_out_and_is_stopped(tmp_path):
    svc = ServiceProcess("silent", [sys.executable, "-c", _SLEEPER], tmp_path / "q.log").start()
    url = f"http://127.0.0.1:{free_port()}/health"
    with pytest.raises(ServiceNotReady) as info:
        svc.wait_ready(url, timeout=1.0, interval=0.05)
    assert info.value.returncode is None
    assert f"silent did not answer {url} within 1.0 s" in str(info.value)
    assert not svc.alive() and svc.stop_requested


def test_wait_until_ok_returns_once_the_url_answers(tmp_path):
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "http.server",
        str(port),
        "--bind",
        "127.0.0.1",
        "--directory",
        str(tmp_path),
    ]
    proc = start_service(cmd, tmp_path / "http.log")
    try:
        wait_until_ok(proc, f"http://127.0.0.1:{port}/", name="http.server", timeout=60, interval=0.05)
        assert proc.poll() is None
    finally:
        assert stop_process(proc, timeout=10, process_group=True) is not None


def test_read_tail(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(10)))
    assert read_tail(log, 3) == "line 7\nline 8\nline 9"
    assert read_tail(tmp_path / "missing.log") == ""
    assert read_tail(None) == ""


def test_a_recycled_pid_is_not_the_recorded_process():
    started = process_create_time(os.getpid())
    assert started is not None and still_running(os.getpid(), started)
    assert not still_running(os.getpid(), started - 100.0)


def test_stop_process_of_nothing_or_an_exited_process(tmp_path):
    assert stop_process(None) is None
    proc = start_service([sys.executable, "-c", "raise SystemExit(5)"], tmp_path / "e.log")
    proc.wait(30)
    assert stop_process(proc, process_group=True) == 5
