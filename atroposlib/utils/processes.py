"""Supervising services run as child processes: start, wait until ready, stop, read the log.

Every service (``run-api``, an inference server, an environment, the trainer, a test's scripted server) is
started the same way, by :func:`start_service`: in a new session (its own process group, so a Ctrl-C in the
terminal reaches only the supervisor and a stop reaches the service's own workers), stdin closed, stdout and
stderr appended to a log file whose first line is the command. Readiness is an HTTP URL answering 200
(:func:`wait_until_ok`, which fails with :class:`ServiceNotReady` carrying the log's tail). A service is
stopped by its own pid or process group with a grace period (:func:`stop_process`): SIGTERM, then SIGKILL.
Nothing is ever signalled by name or port, and a recorded pid is checked against its start time
(:func:`still_running`) so that a recycled pid is never mistaken for it.

:class:`ServiceProcess` bundles these for one long-running service and also tracks the processes the
service starts itself, so that they can be stopped when their parent could not stop them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import requests

try:  # psutil comes with vLLM; without it descendants are not tracked (their parents stop them).
    import psutil
except ImportError:  # pragma: no cover - exercised only without vLLM installed
    psutil = None  # type: ignore[assignment]


class ServiceNotReady(RuntimeError):
    """A started service that never answered: ``returncode`` is its exit status, or None when it still ran
    but the wait timed out. The message names the service and ends with its log's tail."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


def start_service(
    cmd: Sequence[str | os.PathLike[str]],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    shown: Sequence[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a new session (its own process group) with stdin closed and stdout+stderr appended
    to ``log_path`` (parents created), after a first line ``$ <command>``.

    ``env`` is the child's complete environment (None: this process's); ``shown`` is the command written to
    the log (default: ``cmd``; e.g. the service's own command when ``cmd`` wraps it). The log file is closed
    here; the child keeps its own descriptor.
    """
    args = [str(c) for c in cmd]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(shown if shown is not None else args) + "\n").encode())
        log.flush()
        return subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )


def answers_ok(url: str, headers: Mapping[str, str] | None = None, timeout: float = 2.0) -> bool:
    """Whether ``GET url`` answers 200 now (False on any connection error)."""
    try:
        return requests.get(url, headers=dict(headers or {}), timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


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

    Raises :class:`ServiceNotReady` naming ``name`` (followed by ``log_tail()``) when ``proc`` exits first or
    when ``timeout`` seconds pass, after calling ``on_failure`` (e.g. the service's stop) if given.
    """
    deadline = time.monotonic() + timeout
    exited = None
    while time.monotonic() < deadline:
        exited = proc.poll()
        if exited is not None:
            problem = f"{name} exited with {exited}"
            break
        if answers_ok(url, headers):
            return
        time.sleep(interval)
    else:
        problem = f"{name} did not answer {url} within {timeout} s"
    if on_failure is not None:
        on_failure()
    raise ServiceNotReady(f"{problem}:\n{log_tail()}", exited)


def wait_http_ok(
    url: str, timeout: float, *, proc: ServiceProcess | None = None, interval: float = 0.5
) -> bool:
    """Poll ``GET url`` until it answers 200 (True), ``timeout`` passes or ``proc`` exits (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            return False
        if answers_ok(url):
            return True
        time.sleep(interval)
    return False


def read_tail(path: Path | None, lines: int = 40) -> str:
    """The last ``lines`` lines of the log file ``path`` ("" when there is none or it cannot be read)."""
    if path is None:
        return ""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is gone (or not ours) is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_process(
    proc: subprocess.Popen | None,
    timeout: float = 10.0,
    *,
    sig: int = signal.SIGTERM,
    process_group: bool = False,
) -> int | None:
    """Send ``sig`` to ``proc`` (its whole process group with ``process_group``), SIGKILL after ``timeout``
    seconds, and reap it. Returns its exit status (``None`` for no process; ``-9`` when it had to be killed);
    a process that has already exited is only reaped."""
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


@dataclass
class ServiceProcess:
    """One long-running service: ``cmd`` run with ``env`` added to this process's environment, in ``cwd``,
    logged to ``log_path`` (see :func:`start_service`)."""

    name: str
    cmd: Sequence[str | os.PathLike[str]]
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: pid -> start time of every descendant seen so far (see :meth:`record_descendants`).
    descendants: dict[int, float] = field(default_factory=dict, repr=False)
    #: Set by :meth:`stop`: the process ends because its supervisor asked it to.
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
        self.proc = start_service(self.cmd, self.log_path, env={**os.environ, **self.env}, cwd=self.cwd)
        self.create_time = process_create_time(self.proc.pid)
        return self

    def wait_ready(
        self, url: str, timeout: float, *, interval: float = 0.5, stop_on_failure: bool = True
    ) -> None:
        """Block until ``GET url`` answers 200; :class:`ServiceNotReady` with the log's tail when the service
        exits first or ``timeout`` passes (then it is stopped, unless ``stop_on_failure`` is False)."""
        assert self.proc is not None, "start() the service first"
        wait_until_ok(
            self.proc, url, name=self.name, timeout=timeout, interval=interval, log_tail=self.tail,
            on_failure=self.stop if stop_on_failure else None,
        )  # fmt: skip

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

        With ``repeat_after``, a second SIGTERM follows after that many seconds (for programs whose first
        signal asks for a graceful stop and whose second aborts). Whatever is left in its group then gets
        SIGKILL, and any recorded descendant still running (same pid and start time) is stopped as well.
        Returns the exit code (None if the process was never started).
        """
        if self.proc is None:
            return None
        self.stop_requested = True
        self.record_descendants()
        if self.proc.poll() is None:
            self._terminate_group(timeout, repeat_after)
        # Whatever is left in its group (e.g. a worker that ignored SIGTERM) goes too.
        signal_group(self.proc.pid, signal.SIGKILL)
        self.kill_leftover_descendants()
        return self.proc.returncode

    def _terminate_group(self, timeout: float, repeat_after: float | None) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        signal_group(self.proc.pid, signal.SIGTERM)
        if repeat_after is not None and repeat_after < timeout:
            try:
                self.proc.wait(repeat_after)
            except subprocess.TimeoutExpired:
                self.record_descendants()
                signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self.record_descendants()
            signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

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
        """The last ``lines`` lines of the service's log."""
        return read_tail(self.log_path, lines)
