"""Child processes of the demo: started in their own session, logged to a file, stopped by their own pids.

Each service (``run-api``, the environment, the trainer) runs in a new session so that a Ctrl-C in the
terminal reaches only the demo, which then shuts the services down in order. Processes a service
starts itself (the trainer starts vLLM, in yet another session) are recorded while they run, by pid
and start time, so that they can be stopped too if their parent could not stop them: nothing is ever
signalled by name or port, and a recycled pid is never mistaken for a recorded process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atroposlib.testing.processes import read_tail

try:  # psutil comes with vLLM; without it, descendants are not tracked (their parents stop them).
    import psutil
except ImportError:  # pragma: no cover - exercised only without vLLM installed
    psutil = None  # type: ignore[assignment]


@dataclass
class ServiceProcess:
    """One long-running child process of the demo.

    ``cmd`` runs with ``env`` (added to the demo's environment) and its stdout+stderr appended to
    ``log_path``.
    """

    name: str
    cmd: Sequence[str]
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: pid -> start time of every descendant seen so far (see :meth:`record_descendants`).
    descendants: dict[int, float] = field(default_factory=dict, repr=False)
    #: Set by :meth:`stop`: the process ends because the demo asked it to.
    stop_requested: bool = False
    #: Start time of the process (psutil's ``create_time``), None without psutil.
    create_time: float | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> ServiceProcess:
        """Launch the process in a new session (its own process group)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(("$ " + " ".join(str(c) for c in self.cmd) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                [str(c) for c in self.cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                cwd=self.cwd,
                start_new_session=True,
            )
        self.create_time = process_create_time(self.proc.pid)
        return self

    def record_descendants(self) -> None:
        """Remember every live descendant (pid and start time) of the process."""
        if psutil is None or not self.alive():
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self.descendants.setdefault(child.pid, child.create_time())

    def known_processes(self) -> dict[int, float]:
        """pid -> start time of the process itself and of every descendant recorded so far."""
        known = dict(self.descendants)
        if self.proc is not None and self.create_time is not None:
            known[self.proc.pid] = self.create_time
        return known

    def stop(self, timeout: float = 30.0, repeat_after: float | None = None) -> int | None:
        """Stop the process: SIGTERM to its process group, SIGKILL after ``timeout`` seconds.

        With ``repeat_after``, a second SIGTERM follows after that many seconds (for programs whose
        first signal asks for a graceful stop and whose second aborts). Then any recorded descendant
        still running (the same process: same pid and start time) is stopped as well. Returns the exit
        code (None if the process was never started).
        """
        if self.proc is None:
            return None
        self.stop_requested = True
        self.record_descendants()
        if self.proc.poll() is None:
            deadline = time.monotonic() + timeout
            _signal_group(self.proc.pid, signal.SIGTERM)
            if repeat_after is not None and repeat_after < timeout:
                try:
                    self.proc.wait(repeat_after)
                except subprocess.TimeoutExpired:
                    self.record_descendants()
                    _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.record_descendants()
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # Whatever is left in its group (e.g. a worker that ignored SIGTERM) goes too.
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.kill_leftover_descendants()
        return self.proc.returncode

    def kill_leftover_descendants(self, grace: float = 10.0) -> list[int]:
        """SIGTERM, then SIGKILL after ``grace`` s, each recorded descendant still running; returns their pids."""
        if psutil is None:
            return []
        leftovers = []
        for pid, started in self.descendants.items():
            if still_running(pid, started):
                with contextlib.suppress(psutil.Error):
                    leftovers.append(psutil.Process(pid))
        for proc in leftovers:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, still_alive = psutil.wait_procs(leftovers, timeout=grace)
        for proc in still_alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        return [p.pid for p in leftovers]

    def tail(self, lines: int = 30) -> str:
        return read_tail(self.log_path, lines)


def process_create_time(pid: int) -> float | None:
    """psutil's start time of ``pid`` (None without psutil or when it is gone)."""
    if psutil is None:
        return None
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def still_running(pid: int, create_time: float) -> bool:
    """Whether the process ``pid`` that started at ``create_time`` still runs (zombies count as gone)."""
    if psutil is None:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 1e-3 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_http_ok(
    url: str, timeout: float, *, proc: ServiceProcess | None = None, interval: float = 0.5
) -> bool:
    """Poll ``GET url`` until it answers 200 (True), ``timeout`` passes or ``proc`` exits (False)."""
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            return False
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(interval)
    return False
