"""The bubblewrap command line of one sandboxed run.

A run is ``bwrap`` (Debian package ``bubblewrap``) around ``prlimit`` around the program:

* namespaces: a new user namespace (nested user namespaces disabled), and new pid, network, IPC, UTS,
  mount and (where the kernel allows) cgroup namespaces. The network namespace holds only its own loopback
  device, so the program reaches no host, and nothing listening on the host's 127.0.0.1 or abstract Unix
  sockets either (its 127.0.0.1 is a different one, where nothing listens). In the pid namespace the
  program sees only its own processes; bwrap is its init, so killing bwrap (or its parent dying:
  ``--die-with-parent``) kills every process of the run. ``--new-session`` detaches it from the terminal.
* file system: a fresh root holding read-only binds of ``/usr``, the ``/lib*`` and ``/bin`` links or
  directories, the few files of ``/etc`` the dynamic loader needs, the Python installation's prefixes and
  any extra paths the caller names; a private tmpfs work directory (``WORK_DIR``, the current directory,
  holding the caller's files), a private ``/tmp`` and ``/dev/shm`` (each a tmpfs of ``disk_mb``), a new
  ``/proc`` and a minimal read-only ``/dev``. Everything else (home directories, ``/root``, the host's
  ``/tmp``, the repository) is absent. The root and every bind are read-only, binds are ``nosuid``.
* environment: cleared; ``PATH``, ``HOME``, ``TMPDIR``, ``LANG`` and a few single-thread hints are set.
* limits: ``prlimit`` sets CPU time, address space, file size, processes and open files
  (:class:`~atroposlib.sandbox.limits.SandboxLimits`) inside the user namespace, and core dumps off.

The process limit needs a non-root user: the kernel never applies ``RLIMIT_NPROC`` to root (nor to a
user namespace whose user is root outside). When the caller is root, the run therefore starts as a
two-level sandbox: an outer ``bwrap`` (run as root, no user namespace, all capabilities dropped but
``CAP_SETUID``/``CAP_SETGID``) builds the read-only file system, ``setpriv`` switches to a dedicated
unprivileged user id (one per parallel slot: ``uid_base + slot``), and an inner ``bwrap`` as that user adds
the namespaces, the private mounts and the limits above. On kernels since 5.14 the process count is kept per
user namespace, so a program's fork bomb stops at ``max_processes`` without touching the caller's processes.
When the caller is not root a single ``bwrap`` does everything as the caller's user.

Not protected against: kernel exploits (there is no seccomp filter, so the full system-call surface of the
kernel is reachable), side channels, and reading what the read-only binds expose (system files, the Python
installation and its site-packages). CPU time is limited per process, not per run (the wall-clock limit
bounds the run). Memory is limited as address space per process, not as resident memory of the run.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Optional

from atroposlib.sandbox.limits import SandboxLimits

#: The program's current directory inside the sandbox (a private tmpfs).
WORK_DIR = "/sandbox"

#: Host paths bound read-only when they exist (symbolic links are recreated as links).
SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
)

_ENV = {
    "HOME": WORK_DIR,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

_MIB = 1 << 20


class SandboxError(RuntimeError):
    """The sandbox cannot run programs here; the message names the cause (missing tool, refused namespace)."""


@dataclass(frozen=True)
class Tools:
    """Absolute paths of the host programs a run needs (``setpriv`` only when the caller is root)."""

    bwrap: str
    prlimit: str
    sh: str
    setpriv: Optional[str]


def find_tools(bwrap_path: Optional[str] = None, as_root: Optional[bool] = None) -> Tools:
    """Locate ``bwrap`` (``bwrap_path`` or ``PATH``), ``prlimit``, ``sh`` and, for root, ``setpriv``.

    Raises :class:`SandboxError` naming the first one missing and the package that provides it.
    """
    as_root = os.geteuid() == 0 if as_root is None else as_root
    if bwrap_path is not None:
        if not (os.path.isfile(bwrap_path) and os.access(bwrap_path, os.X_OK)):
            raise SandboxError(f"bubblewrap not found at {bwrap_path!r} (the configured bwrap path)")
        bwrap = os.path.abspath(bwrap_path)
    else:
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxError(
                "bubblewrap (bwrap) is not on PATH; install it (Debian/Ubuntu: apt-get install bubblewrap)"
            )
        bwrap = os.path.abspath(found)
    needed = {"prlimit": "util-linux", "sh": "dash or bash"}
    if as_root:
        needed["setpriv"] = "util-linux"
    located = {}
    for name, package in needed.items():
        path = shutil.which(name) or shutil.which(name, path="/usr/bin:/bin")
        if path is None:
            raise SandboxError(f"{name} is not on PATH; the sandbox needs it (package {package})")
        located[name] = os.path.abspath(path)
    return Tools(bwrap=bwrap, prlimit=located["prlimit"], sh=located["sh"], setpriv=located.get("setpriv"))


def python_paths(executable: str = sys.executable) -> list[str]:
    """Host directories a Python interpreter needs: this interpreter's prefixes, the prefix ``executable``
    sits in (a virtualenv's) and the prefix of the binary it resolves to."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(executable))))
    paths.add(os.path.dirname(os.path.dirname(os.path.realpath(executable))))
    return sorted({os.path.abspath(p) for p in paths if p} | {os.path.realpath(p) for p in paths if p})


def _covered(path: str, roots: Iterable[str]) -> bool:
    candidate = PurePosixPath(path)
    return any(candidate == PurePosixPath(r) or PurePosixPath(r) in candidate.parents for r in roots)


def readonly_layout(
    extra_paths: Sequence[str],
    mountpoints: Sequence[str],
    *,
    system: bool = True,
    existing: Sequence[str] = (),
) -> list[str]:
    """bwrap options for the read-only file system: system paths (unless ``system`` is False),
    ``extra_paths`` and empty ``mountpoints``.

    Parent directories of binds are created world-readable (bwrap's default for them is 0700, which a
    non-root sandbox user could not traverse), except the ``existing`` ones. Paths already inside a bound
    directory are skipped.
    """
    args: list[str] = []
    bound: list[str] = []
    made: set[str] = {"/", *existing}

    def parents(path: str) -> None:
        for parent in reversed(PurePosixPath(path).parents):
            text = str(parent)
            if text not in made and not _covered(text, bound):
                args.extend(["--perms", "0755", "--dir", text])
                made.add(text)

    for path in [*(SYSTEM_PATHS if system else ()), *extra_paths]:
        if _covered(path, bound) or not os.path.lexists(path):
            continue
        parents(path)
        if os.path.islink(path):
            args.extend(["--symlink", os.readlink(path), path])
        else:
            args.extend(["--ro-bind", path, path])
            bound.append(path)
    for path in mountpoints:
        parents(path)
        args.extend(["--perms", "0755", "--dir", path])
        made.add(path)
    return args


def prlimit_args(tools: Tools, limits: SandboxLimits) -> list[str]:
    """``prlimit`` with ``limits`` (soft = hard, except CPU: SIGXCPU at the limit, SIGKILL 1 s later)."""
    fsize = limits.file_size_mb * _MIB
    memory = limits.memory_mb * _MIB
    return [
        tools.prlimit,
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        f"--as={memory}:{memory}",
        f"--fsize={fsize}:{fsize}",
        f"--nproc={limits.max_processes}:{limits.max_processes}",
        f"--nofile={limits.max_open_files}:{limits.max_open_files}",
        "--core=0:0",
        "--",
    ]


def build_command(
    tools: Tools,
    argv: Sequence[str],
    limits: SandboxLimits,
    *,
    started_fd: int,
    files: Mapping[str, int],
    extra_paths: Sequence[str],
    env: Mapping[str, str],
    uid: Optional[int],
    devices: Sequence[str] = (),
) -> list[str]:
    """The host command line of one run.

    ``started_fd`` is an inherited pipe that the sandbox writes one byte to once it is set up, just before
    the program starts (so a failure of bwrap itself can be told from a failing program). ``files`` maps
    names in the work directory to inherited readable file descriptors whose contents are copied there.
    ``uid`` set: the two-level form for a root caller, the program running as that user id; None: one
    ``bwrap`` as the caller. ``devices``: host device nodes (e.g. ``/dev/nvidia0``) made usable at the same
    path inside; those that do not exist are left out.
    """
    device_binds = [arg for path in devices for arg in ("--dev-bind-try", path, path)]
    bwrap_home = [] if _covered(tools.bwrap, SYSTEM_PATHS) else [tools.bwrap]
    layout = readonly_layout([*extra_paths, *bwrap_home], [])
    disk = str(limits.disk_mb * _MIB)
    private = [
        "--unshare-user",
        "--disable-userns",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--proc", "/proc",
        "--dev", "/dev",
        *device_binds,
        "--size", disk, "--perms", "1777", "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--size", disk, "--perms", "0755", "--tmpfs", WORK_DIR,
        "--size", disk, "--perms", "1777", "--tmpfs", "/tmp",
    ]  # fmt: skip
    # Binds under the private mounts (e.g. a virtualenv in the host's /tmp) would be hidden by them:
    # bind them again on top.
    private_mounts = ("/tmp", "/dev/shm", WORK_DIR)
    hidden = [p for p in [*extra_paths, *bwrap_home] if _covered(p, private_mounts)]
    private.extend(readonly_layout(hidden, [], system=False, existing=private_mounts))
    for name, fd in files.items():
        private.extend(["--perms", "0644", "--file", str(fd), f"{WORK_DIR}/{name}"])
    private.extend(["--chdir", WORK_DIR, "--remount-ro", "/", "--clearenv"])
    for key, value in {**_ENV, **env}.items():
        private.extend(["--setenv", key, value])
    # The marker is written through /proc so that any POSIX sh can do it whatever the descriptor's number.
    launcher = [tools.sh, "-c", f'printf x >/proc/self/fd/{started_fd} && exec "$@"', "sandbox"]
    program = [*prlimit_args(tools, limits), *launcher, *argv]
    if uid is None:
        return [tools.bwrap, *layout, *private, "--", *program]
    outer = [
        tools.bwrap,
        "--die-with-parent",
        "--cap-drop", "ALL",
        "--cap-add", "CAP_SETUID",
        "--cap-add", "CAP_SETGID",
        *layout,
        # The host's /proc, not a new one: the kernel lets the inner user namespace mount its own /proc
        # only where a fully visible proc is mounted, and bwrap's --proc covers parts of it.
        "--bind", "/proc", "/proc",
        "--dev", "/dev",
        *device_binds,
        "--perms", "0755", "--dir", WORK_DIR,
        "--perms", "1777", "--dir", "/tmp",
        "--remount-ro", "/",
        "--",
    ]  # fmt: skip
    switch = [tools.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    # The outer view is read-only already (its root is remounted, its binds are read-only); binding it
    # read-only again would make its /proc read-only, and the kernel then refuses the inner /proc mount.
    inner = [tools.bwrap, "--bind", "/", "/", *private, "--", *program]
    return [*outer, *switch, *inner]
