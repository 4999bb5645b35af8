"""Per-run resource limits of the sandbox and the result of one run."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class SandboxLimits(BaseModel):
    """Resource limits of one sandboxed run; every field has a safe default.

    * ``cpu_seconds``: CPU time per process (``RLIMIT_CPU``; SIGXCPU at the limit, SIGKILL one second later).
      Each process of the program has its own budget; ``wall_seconds`` bounds the run as a whole.
    * ``wall_seconds``: wall-clock time of the whole run, after which every process of the sandbox is killed.
    * ``memory_mb``: address space per process in MiB (``RLIMIT_AS``): allocations beyond it fail.
    * ``file_size_mb``: largest file a process may write, in MiB (``RLIMIT_FSIZE``).
    * ``disk_mb``: size in MiB of each of the two private tmpfs mounts (the work directory and ``/tmp``).
    * ``max_processes``: processes and threads the program may have at once (``RLIMIT_NPROC``, counted in
      the sandbox's own user namespace under a user id of its own).
    * ``max_open_files``: file descriptors per process (``RLIMIT_NOFILE``).
    * ``max_output_bytes``: bytes kept of stdout and of stderr each; a program that prints more is stopped
      and its result is marked ``truncated``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_seconds: int = Field(10, ge=1, description="CPU seconds per process (RLIMIT_CPU)")
    wall_seconds: float = Field(20.0, gt=0, description="wall-clock seconds before the whole run is killed")
    memory_mb: int = Field(1024, ge=16, description="address space per process in MiB (RLIMIT_AS)")
    file_size_mb: int = Field(16, ge=0, description="largest file a process may write in MiB (RLIMIT_FSIZE)")
    disk_mb: int = Field(64, ge=1, description="size of the work directory tmpfs and of /tmp, each, in MiB")
    max_processes: int = Field(64, ge=1, description="processes and threads at once (RLIMIT_NPROC)")
    max_open_files: int = Field(256, ge=16, description="open file descriptors per process (RLIMIT_NOFILE)")
    max_output_bytes: int = Field(1 << 20, ge=1, description="bytes kept of stdout and of stderr, each")


class SandboxResult(BaseModel):
    """What one sandboxed run did.

    * ``exit_code``: the program's exit status; ``-N`` when signal N ended it; None when the sandbox
      stopped it (wall-clock or output limit).
    * ``stdout`` / ``stderr``: what it printed (UTF-8, undecodable bytes replaced), at most
      ``max_output_bytes`` each.
    * ``timed_out``: the wall-clock limit was reached.
    * ``truncated``: a stream exceeded ``max_output_bytes`` (the program was stopped there).
    * ``duration_s``: wall-clock seconds from start to the end of the run, sandbox set-up included.
    * ``reason``: why it ended abnormally ("wall-clock limit", "output limit", "cpu limit", "memory limit",
      "file size limit", "killed by signal N", "exit status N"), None when it exited with status 0.
    """

    model_config = ConfigDict(frozen=True)

    exit_code: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0
    reason: Optional[str] = None

    @property
    def ok(self) -> bool:
        """True when the program exited by itself with status 0."""
        return self.exit_code == 0 and not self.timed_out and not self.truncated
