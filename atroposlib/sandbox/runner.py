"""Running programs in the sandbox from asyncio: a pool of parallel runs, output caps, kills.

:class:`Sandbox` starts each run as an asyncio subprocess (the event loop never blocks on a program), at
most ``max_parallel`` at once. Output is read while the program runs and kept up to
``max_output_bytes`` per stream; a program that prints more is stopped at once. At the wall-clock limit the
run's whole process group is killed; the sandbox's init dies with it and the kernel then kills every
process left in the run's pid namespace. What the sandbox isolates is described in
:mod:`atroposlib.sandbox.bubblewrap`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Optional

from atroposlib.sandbox.bubblewrap import (
    WORK_DIR,
    SandboxError,
    Tools,
    build_command,
    find_tools,
    python_paths,
)
from atroposlib.sandbox.limits import SandboxLimits, SandboxResult

logger = logging.getLogger(__name__)

#: The file ``run_python`` writes the code to, in the work directory.
PROGRAM_FILE = "main.py"
DEFAULT_UID_BASE = 1_000_000_000
_READ_CHUNK = 1 << 16
_SIGNAL_REASONS = {
    signal.SIGXCPU: "cpu limit",
    signal.SIGXFSZ: "file size limit",
}


class _Stream:
    """One output stream read into a capped buffer."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.overflow = False

    async def pump(self, reader: asyncio.StreamReader, on_overflow: asyncio.Event) -> None:
        while True:
            chunk = await reader.read(_READ_CHUNK)
            if not chunk:
                return
            if self.overflow:
                # Drained and dropped: asyncio only reports the exit once every pipe reaches EOF.
                continue
            room = self.cap - len(self.data)
            if len(chunk) > room:
                self.data += chunk[:room]
                self.overflow = True
                on_overflow.set()
                continue
            self.data += chunk

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _valid_file_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..") and "\0" not in name


class Sandbox:
    """Runs programs under bubblewrap within :class:`SandboxLimits`, up to ``max_parallel`` at once.

    ``limits`` are the defaults of every run (a run may pass its own). ``allow_unsandboxed=True`` is an
    explicit escape hatch for machines where bubblewrap cannot run: programs then run as plain
    subprocesses with the same rlimits and time limits but **no isolation at all**; it is logged as an
    error on creation. ``bwrap_path`` names the bwrap binary (default: ``bwrap`` on ``PATH``),
    ``python`` the interpreter of :meth:`run_python` (default: this one), ``extra_ro_paths`` more host
    paths bound read-only, ``devices`` host device nodes programs may use (e.g. the ``/dev/nvidia*`` nodes
    of a GPU: none by default, the sandbox's ``/dev`` holding only ``null``, ``zero``, ``random`` and the
    like), and ``uid_base`` the first of the user ids runs use when the caller is root.

    Creating a Sandbox checks nothing; call :meth:`check` once at start-up. A run whose sandbox fails to
    start raises :class:`SandboxError`.
    """

    def __init__(
        self,
        max_parallel: Optional[int] = None,
        limits: Optional[SandboxLimits] = None,
        allow_unsandboxed: bool = False,
        *,
        bwrap_path: Optional[str] = None,
        python: Optional[str] = None,
        extra_ro_paths: Sequence[str] = (),
        devices: Sequence[str] = (),
        uid_base: int = DEFAULT_UID_BASE,
    ) -> None:
        if max_parallel is not None and max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        self.max_parallel = max_parallel or os.cpu_count() or 1
        self.limits = limits or SandboxLimits()
        self.allow_unsandboxed = allow_unsandboxed
        self.bwrap_path = bwrap_path
        self.python = python or sys.executable
        self.extra_ro_paths = [*python_paths(self.python), *extra_ro_paths]
        self.devices = list(devices)
        self.uid_base = uid_base
        self._as_root = os.geteuid() == 0
        self._tools: Optional[Tools] = None
        self._slots: Optional[asyncio.Queue[int]] = None
        self._slots_loop: Optional[asyncio.AbstractEventLoop] = None
        if allow_unsandboxed:
            logger.error(
                "Sandbox(allow_unsandboxed=True): programs run WITHOUT isolation (no namespaces, the host's "
                "files and network are reachable); use this only on a machine where that is acceptable"
            )

    # -- set-up ----------------------------------------------------------------------------------------
    def _find_tools(self) -> Tools:
        if self._tools is None:
            self._tools = find_tools(self.bwrap_path, as_root=self._as_root)
        return self._tools

    def check(self) -> None:
        """Start one trivial program in the sandbox; raise :class:`SandboxError` naming why it cannot run.

        Causes named: bwrap, prlimit, setpriv or sh missing; the kernel refusing the namespaces (e.g.
        unprivileged user namespaces disabled); the interpreter not runnable inside. Does nothing with
        ``allow_unsandboxed=True``. Blocks for a fraction of a second (also when called from a running
        event loop, whose other tasks then wait); call it once at start-up.
        """
        if self.allow_unsandboxed:
            return
        self._find_tools()
        # A fresh event loop in a worker thread, so this also works from inside a running loop.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            result = pool.submit(asyncio.run, self._check_run()).result()
        if result.exit_code != 0 or result.stdout.strip() != "ok":
            detail = (result.stderr.strip() or result.reason or "no output").splitlines()[-1]
            raise SandboxError(f"the sandbox cannot run Python ({self.python}): {detail}")

    async def _check_run(self) -> SandboxResult:
        checker = Sandbox(
            1,
            self.limits,
            bwrap_path=self.bwrap_path,
            python=self.python,
            extra_ro_paths=self.extra_ro_paths,
            uid_base=self.uid_base,
        )
        return await checker.run_python("print('ok')")

    def _slot_queue(self) -> asyncio.Queue[int]:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots = asyncio.Queue()
            for slot in range(self.max_parallel):
                self._slots.put_nowait(slot)
            self._slots_loop = loop
        return self._slots

    # -- runs ------------------------------------------------------------------------------------------
    async def run_python(
        self,
        code: str,
        stdin: str = "",
        files: Optional[Mapping[str, str]] = None,
        limits: Optional[SandboxLimits] = None,
    ) -> SandboxResult:
        """Run ``code`` (saved as ``main.py`` in the work directory) with the sandbox's Python.

        ``files`` are more text files for the work directory (name -> contents). See :meth:`run`.
        """
        all_files = dict(files or {})
        all_files[PROGRAM_FILE] = code
        return await self.run([self.python, PROGRAM_FILE], stdin=stdin, files=all_files, limits=limits)

    async def run(
        self,
        argv: Sequence[str],
        stdin: str = "",
        files: Optional[Mapping[str, str]] = None,
        limits: Optional[SandboxLimits] = None,
    ) -> SandboxResult:
        """Run ``argv`` in the sandbox (``argv[0]`` is looked up on the sandbox's ``PATH``) and wait for it.

        The program starts in the work directory holding ``files`` (plain names, no ``/``), reads
        ``stdin`` and is stopped at ``limits`` (default: the sandbox's). Waits for a free slot when
        ``max_parallel`` runs are going. Raises :class:`SandboxError` when the sandbox itself fails to start
        and ``ValueError`` for an empty ``argv`` or a bad file name; whatever the program does is reported
        in the :class:`SandboxResult`.
        """
        if not argv:
            raise ValueError("argv is empty")
        for name in files or {}:
            if not _valid_file_name(name):
                raise ValueError(f"bad file name {name!r}: use a plain name without '/'")
        limits = limits or self.limits
        slots = self._slot_queue()
        slot = await slots.get()
        try:
            return await self._run_in_slot(slot, list(argv), stdin, dict(files or {}), limits)
        finally:
            slots.put_nowait(slot)

    async def _run_in_slot(
        self, slot: int, argv: list[str], stdin: str, files: dict[str, str], limits: SandboxLimits
    ) -> SandboxResult:
        read_fd, write_fd = os.pipe()
        # The sandbox reopens the pipe through /proc as its own (non-root) user.
        os.fchmod(write_fd, 0o622)
        file_fds: dict[str, int] = {}
        try:
            for name, content in files.items():
                file_fds[name] = _memory_file(name, content)
            if self.allow_unsandboxed:
                return await _run_unsandboxed(argv, stdin, files, limits)
            tools = self._find_tools()
            command = build_command(
                tools,
                argv,
                limits,
                started_fd=write_fd,
                files=file_fds,
                extra_paths=self.extra_ro_paths,
                env={"PATH": _sandbox_path(self.python)},
                uid=self.uid_base + slot if self._as_root else None,
                devices=self.devices,
            )
            started = time.monotonic()
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(write_fd, *file_fds.values()),
                start_new_session=True,
            )
            os.close(write_fd)
            write_fd = -1
            for fd in file_fds.values():
                os.close(fd)
            file_fds.clear()
            result = await _supervise(process, stdin, limits, started)
            if not _marker_written(read_fd):
                detail = result.stderr.strip().splitlines()
                raise SandboxError(
                    "the sandbox failed to start: "
                    + (detail[-1] if detail else f"exit status {result.exit_code}")
                )
            return result
        finally:
            for fd in (read_fd, write_fd, *file_fds.values()):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)


def _sandbox_path(python: str) -> str:
    return ":".join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"])


def _memory_file(name: str, content: str) -> int:
    fd = os.memfd_create(f"sandbox-{name}", 0)
    data = content.encode("utf-8")
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _marker_written(read_fd: int) -> bool:
    os.set_blocking(read_fd, False)
    try:
        return os.read(read_fd, 1) == b"x"
    except BlockingIOError:
        return False


async def _feed(writer: Optional[asyncio.StreamWriter], data: bytes) -> None:
    if writer is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
        writer.close()
        await writer.wait_closed()


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


async def _supervise(
    process: asyncio.subprocess.Process, stdin: str, limits: SandboxLimits, started: float
) -> SandboxResult:
    """Feed stdin, read both streams under the cap, kill at the wall-clock or output limit, wait."""
    overflow = asyncio.Event()
    out, err = _Stream(limits.max_output_bytes), _Stream(limits.max_output_bytes)
    assert process.stdout is not None and process.stderr is not None
    io_tasks = [
        asyncio.ensure_future(out.pump(process.stdout, overflow)),
        asyncio.ensure_future(err.pump(process.stderr, overflow)),
        asyncio.ensure_future(_feed(process.stdin, stdin.encode("utf-8"))),
    ]
    waiter = asyncio.ensure_future(process.wait())
    overflow_wait = asyncio.ensure_future(overflow.wait())
    timed_out = False
    try:
        done, _ = await asyncio.wait(
            {waiter, overflow_wait}, timeout=limits.wall_seconds, return_when=asyncio.FIRST_COMPLETED
        )
        if waiter not in done:
            timed_out = not overflow.is_set()
            _kill_group(process)
        else:
            # The program has exited; anything it left running dies with the sandbox's init.
            _kill_group(process)
        await waiter
        # Once the sandbox is gone the pipes close; bounded wait in case a stray holder keeps one open.
        await asyncio.wait(io_tasks, timeout=5)
    finally:
        overflow_wait.cancel()
        for task in io_tasks:
            task.cancel()
        if not waiter.done():
            _kill_group(process)
            waiter.cancel()
    duration = time.monotonic() - started
    truncated = overflow.is_set()
    code = process.returncode
    exit_code: Optional[int]
    if timed_out or truncated:
        exit_code = None
    elif code is not None and code > 128:
        # bwrap reports a program killed by signal N as exit status 128 + N.
        exit_code = -(code - 128)
    else:
        exit_code = code
    return SandboxResult(
        exit_code=exit_code,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        truncated=truncated,
        duration_s=duration,
        reason=_reason(exit_code, timed_out, truncated, err.data),
    )


def _reason(exit_code: Optional[int], timed_out: bool, truncated: bool, stderr: bytes) -> Optional[str]:
    if timed_out:
        return "wall-clock limit"
    if truncated:
        return "output limit"
    if exit_code is None or exit_code == 0:
        return None
    if exit_code < 0:
        number = -exit_code
        try:
            known = _SIGNAL_REASONS.get(signal.Signals(number))
        except ValueError:
            known = None
        return known or f"killed by signal {number}"
    tail = stderr[-2000:]
    if b"MemoryError" in tail or b"Cannot allocate memory" in tail:
        return "memory limit"
    if b"File too large" in tail:
        return "file size limit"
    return f"exit status {exit_code}"


async def _run_unsandboxed(
    argv: list[str], stdin: str, files: dict[str, str], limits: SandboxLimits
) -> SandboxResult:
    """The ``allow_unsandboxed`` path: a plain subprocess in a temporary directory with rlimits only."""
    import resource
    import shutil
    import tempfile

    work = tempfile.mkdtemp(prefix="atroposlib-unsandboxed-")
    try:
        for name, content in files.items():
            with open(os.path.join(work, name), "w", encoding="utf-8") as handle:
                handle.write(content)
        memory = limits.memory_mb << 20
        fsize = limits.file_size_mb << 20

        def set_limits() -> None:
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=work,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=set_limits,
        )
        return await _supervise(process, stdin, limits, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


__all__ = ["PROGRAM_FILE", "WORK_DIR", "Sandbox"]
