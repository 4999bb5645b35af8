"""Waiting for a started service to answer, and stopping it by its own pid.

The tests, benchmarks and launchers in :mod:`atroposlib.testing` start real services (``run-api``, vLLM, the
scripted server, console tools) as subprocesses in their own session. These two functions are how each of them
waits for readiness and how it is shut down: never by name, always by the pid (or process group) it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import requests


class ServiceNotReady(RuntimeError):
    """A started service that never answered: ``returncode`` is its exit status, or None when it still ran
    but the wait timed out."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


def wait_until_ok(
    proc: subprocess.Popen,
    url: str,
    *,
    name: str,
    timeout: float,
    interval: float = 0.1,
    headers: Mapping[str, str] | None = None,
    log_tail: Callable[[], str] = lambda: "",
    on_failure: Callable[[], object] | None = None,
) -> None:
    """Poll ``GET url`` every ``interval`` seconds until it answers 200.

    Raises :class:`ServiceNotReady` (a ``RuntimeError``) naming ``name`` (followed by ``log_tail()``) when
    ``proc`` exits first or when ``timeout`` seconds pass, after calling ``on_failure`` (e.g. the launcher's
    stop) if given.
    """
    deadline = time.monotonic() + timeout
    exited = None
    while time.monotonic() < deadline:
        exited = proc.poll()
        if exited is not None:
            problem = f"{name} exited with {exited}"
            break
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, headers=dict(headers or {}), timeout=2).status_code == 200:
                return
        time.sleep(interval)
    else:
        problem = f"{name} did not answer {url} within {timeout} s"
    if on_failure is not None:
        on_failure()
    raise ServiceNotReady(f"{problem}:\n{log_tail()}", exited)


def read_tail(path: Path | None, lines: int = 40) -> str:
    """The last ``lines`` lines of the log file ``path`` ("" when there is none or it cannot be read)."""
    if path is None:
        return ""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_process(
    proc: subprocess.Popen | None,
    timeout: float = 10.0,
    *,
    sig: int = signal.SIGTERM,
    process_group: bool = False,
) -> int | None:
    """Send ``sig`` to ``proc`` (its whole process group with ``process_group``), SIGKILL after ``timeout``
    seconds, and reap it. Returns its exit status (``None`` for no process); a process that has already
    exited is only reaped."""
    if proc is None:
        return None
    if proc.poll() is None:
        kill = os.killpg if process_group else os.kill
        with contextlib.suppress(ProcessLookupError):
            kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def tree_usage(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) used so far and resident bytes now, of process ``pid`` and its live
    descendants; processes that exit while they are read count as zero. Needs ``psutil``."""
    import psutil

    cpu, rss = 0.0, 0
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for process in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                cpu += times.user + times.system
                rss += process.memory_info().rss
    return cpu, rss
