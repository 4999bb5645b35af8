"""An inference server the trainer starts never outlives the trainer, and a stale one never blocks a resume.

The trainer starts its inference server in a session of its own (so that a Ctrl-C in the terminal reaches the
trainer, which then stops the server in order). A trainer that is killed outright (``kill -9``, the OOM
killer, a lost node's process group) cannot stop it, and the server would keep running with its port, its
memory and old weights. Two things prevent that:

* :func:`bound_to_parent` wraps the server's command line in a few-line launcher that asks Linux to send
  the server a signal (``SIGTERM``) when the process that started it dies (``prctl(PR_SET_PDEATHSIG)``),
  then ``exec``\\ s the server (same pid, so the caller's process handle stays valid). If the trainer died
  before the request took effect, the launcher exits instead of starting a server nobody owns.
* :class:`ServerPidFile` records the running server (pid and start time) and its owner (the trainer's pid
  and start time) next to the server's logs. A trainer that starts a server on the same port first stops a
  recorded server whose owner is gone, its whole process group, so ``--resume`` after a crash needs nobody
  to find and kill an orphan, also where the death signal is not available or the server ignored it. A
  server whose owner still runs is never touched. Processes are identified by pid *and* start time, so a
  recycled pid is never mistaken for the recorded process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

#: The launcher: ``python -c LAUNCHER PARENT_PID SIGNAL PROGRAM ARG...``.
LAUNCHER = """\
import ctypes, os, sys
parent, sig = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, sig, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
    sys.stderr.write("prctl(PR_SET_PDEATHSIG) failed: errno %d\\n" % ctypes.get_errno())
if os.getppid() != parent:
    sys.exit("the process that started this server is gone; not starting it")
os.execv(sys.argv[3], sys.argv[3:])
"""


def parent_death_supported() -> bool:
    """Whether this platform can signal a child when its parent dies (Linux)."""
    return sys.platform.startswith("linux")


def bound_to_parent(cmd: Sequence[str], sig: int = signal.SIGTERM) -> list[str]:
    """``cmd`` (whose first item is an executable path) run so that it receives ``sig`` when the calling
    process dies. Unchanged where the platform has no such signal.

    The signal follows the *thread* that starts the process: start it from a thread that lives as long as
    the server should (the main thread, or a thread that stops the server before it ends).
    """
    if not parent_death_supported():
        return list(cmd)
    return [sys.executable, "-c", LAUNCHER, str(os.getpid()), str(int(sig)), *map(str, cmd)]


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (an opaque number, equal for the same process), or None when it is not
    running (zombies count as gone) or the platform cannot say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        stat = None
    if stat is not None:
        fields = stat[stat.rfind(")") + 2 :].split()
        return None if fields[0] in ("Z", "X") else float(fields[19])  # state; starttime (field 22)
    try:
        import psutil
    except ImportError:
        return None
    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time()
    except psutil.Error:
        return None


def same_process(pid: int | None, start: float | None) -> bool:
    """Whether the process recorded as (``pid``, ``start``) still runs."""
    return pid is not None and start is not None and process_start_time(pid) == start


class ServerPidFile:
    """The record of the server a trainer started on one port: ``path`` holds JSON with the server's and
    its owner's pid and start time."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def record(self, server_pid: int, host: str, port: int) -> None:
        """Note that this process owns server ``server_pid`` listening on ``host:port``."""
        me = os.getpid()
        entry = {
            "server_pid": server_pid,
            "server_start": process_start_time(server_pid),
            "owner_pid": me,
            "owner_start": process_start_time(me),
            "host": host,
            "port": port,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry))
        os.replace(tmp, self.path)

    def read(self) -> dict | None:
        try:
            entry = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) else None

    def clear(self, server_pid: int | None = None) -> None:
        """Remove the record (only if it names ``server_pid``, when given)."""
        entry = self.read()
        if entry is not None and server_pid is not None and entry.get("server_pid") != server_pid:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def stop_stale(self, timeout: float = 30.0) -> int | None:
        """Stop the recorded server if it still runs and its owner does not: SIGTERM to its process group,
        SIGKILL after ``timeout`` seconds. Returns its pid, or None when there was nothing to stop (no
        record, the server is gone, or its owner still runs)."""
        entry = self.read()
        if entry is None:
            return None
        pid, start = entry.get("server_pid"), entry.get("server_start")
        if not same_process(pid, start):
            self.clear()
            return None
        if same_process(entry.get("owner_pid"), entry.get("owner_start")):
            return None  # a live trainer's server
        logger.warning(
            "stopping inference server pid %d on port %s, left running by trainer pid %s which is gone",
            pid, entry.get("port"), entry.get("owner_pid"),
        )  # fmt: skip
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while same_process(pid, start) and time.monotonic() < deadline:
            time.sleep(0.1)
        if same_process(pid, start):
            _signal_group(pid, signal.SIGKILL)
            while same_process(pid, start) and time.monotonic() < deadline + 10:
                time.sleep(0.1)
        _signal_group(pid, signal.SIGKILL)  # whatever else is left in its group (engine workers)
        self.clear()
        return pid


def _signal_group(pgid: int, sig: int) -> None:
    """Signal the process group ``pgid`` (the server started it: it is its session leader)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
