"""Running model-written programs safely: bubblewrap namespaces, read-only system binds, rlimits, time limits.

::

    from atroposlib.sandbox import Sandbox, SandboxLimits

    sandbox = Sandbox(max_parallel=4, limits=SandboxLimits(wall_seconds=5))
    sandbox.check()  # SandboxError naming the cause when bubblewrap cannot run here
    result = await sandbox.run_python("print(input()[::-1])", stdin="abc")
    result.stdout, result.exit_code, result.timed_out, result.reason

Every run gets new user, pid, network (its own loopback only: no network at all), IPC, UTS and mount
namespaces, a read-only view of the system and the Python installation, a private tmpfs work directory,
and limits on CPU time, address space, file size, processes, open files, output and wall-clock time
(:class:`SandboxLimits`). There is no fallback to unsandboxed execution unless the caller asks for it
with ``allow_unsandboxed=True`` (logged as an error). What is and is not protected is spelled out in
:mod:`atroposlib.sandbox.bubblewrap`; the asyncio pool in :mod:`atroposlib.sandbox.runner`.
"""

from atroposlib.sandbox.bubblewrap import WORK_DIR, SandboxError
from atroposlib.sandbox.limits import SandboxLimits, SandboxResult
from atroposlib.sandbox.runner import PROGRAM_FILE, Sandbox

__all__ = ["PROGRAM_FILE", "WORK_DIR", "Sandbox", "SandboxError", "SandboxLimits", "SandboxResult"]
