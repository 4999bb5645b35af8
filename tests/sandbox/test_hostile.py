"""Hostile programs against the sandbox: each test fails if the protection it names goes away."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from atroposlib.sandbox import Sandbox, SandboxLimits
from tests.helpers.network import host_listener

REPO = Path(__file__).resolve().parents[2]
QUICK = SandboxLimits(cpu_seconds=2, wall_seconds=4)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    box = Sandbox(max_parallel=4, limits=QUICK)
    box.check()
    return box


async def still_works(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("print(6 * 7)")
    assert result.exit_code == 0 and result.stdout == "42\n"


async def test_infinite_loop_is_killed_and_others_run_meanwhile(sandbox):
    loop_task = asyncio.ensure_future(
        sandbox.run_python("while True:\n    pass\n", limits=SandboxLimits(cpu_seconds=30, wall_seconds=5))
    )
    # Ordinary programs started while the loop spins finish first and normally.
    others = await asyncio.gather(*(sandbox.run_python(f"print({i})") for i in range(3)))
    assert [r.stdout for r in others] == ["0\n", "1\n", "2\n"]
    assert not loop_task.done()
    looped = await loop_task
    assert looped.timed_out and looped.exit_code is None and looped.reason == "wall-clock limit"
    await still_works(sandbox)


async def test_cpu_limit_stops_a_busy_program_before_the_wall_clock(sandbox):
    result = await sandbox.run_python(
        "while True:\n    pass\n", limits=SandboxLimits(cpu_seconds=1, wall_seconds=60)
    )
    assert not result.timed_out
    assert result.reason == "cpu limit" and result.exit_code == -24


async def test_fork_bomb_is_contained_and_the_host_still_spawns(sandbox):
    bomb = textwrap.dedent(
        """
        import os, time
        children = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
        except OSError as exc:
            print("refused after", children, type(exc).__name__, flush=True)
        """
    )
    limits = SandboxLimits(max_processes=20, wall_seconds=20)
    result = await sandbox.run_python(bomb, limits=limits)
    assert result.stdout.startswith("refused after"), result
    forked = int(result.stdout.split()[2])
    assert forked < 20
    # The sleeping children died with the sandbox: the run did not wait for them.
    assert not result.timed_out
    assert subprocess.run(["true"], check=False).returncode == 0
    await still_works(sandbox)


async def test_shell_fork_bomb_is_contained(sandbox):
    limits = SandboxLimits(max_processes=16, wall_seconds=3)
    result = await sandbox.run(["sh", "-c", "b() { b | b & }; b; sleep 1; echo survived"], limits=limits)
    assert "survived" in result.stdout or result.timed_out
    assert subprocess.run(["true"], check=False).returncode == 0
    await still_works(sandbox)


async def test_allocating_8_gib_fails(sandbox):
    result = await sandbox.run_python("block = bytearray(8 << 30)\nprint('allocated')\n")
    assert "allocated" not in result.stdout
    assert result.reason == "memory limit" and "MemoryError" in result.stderr


async def test_writing_outside_the_work_directory_leaves_nothing_on_the_host(sandbox, tmp_path):
    name = f"sandbox-escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", str(tmp_path / name), str(REPO / name), str(Path.home() / name)]
    code = textwrap.dedent(
        f"""
        for path in {targets!r}:
            try:
                with open(path, "w") as handle:
                    handle.write("escaped")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, type(exc).__name__)
        """
    )
    result = await sandbox.run_python(code)
    assert result.exit_code == 0
    # /tmp inside is the sandbox's own; the rest is read-only or absent.
    assert f"wrote /tmp/{name}" in result.stdout
    for path in targets[1:]:
        assert f"refused {path}" in result.stdout
    for path in targets:
        assert not os.path.exists(path), path


@pytest.mark.parametrize(
    ("family", "address"),
    [
        (socket.AF_INET, ("127.0.0.1", 0)),
        (socket.AF_UNIX, f"\0atroposlib-sandbox-test-{uuid.uuid4().hex}"),
    ],
    ids=["tcp-on-loopback", "abstract-unix-socket"],
)
async def test_host_listener_gets_no_connection(sandbox, family, address):
    listener = host_listener(family, address)
    code = textwrap.dedent(
        f"""
        import socket
        s = socket.socket(socket.{family.name}, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect({listener.getsockname()!r})
            s.sendall(b"hello")
            print("connected")
        except OSError as exc:
            print("refused", type(exc).__name__)
        """
    )
    try:
        result = await sandbox.run_python(code)
        assert result.stdout.startswith("refused"), result
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-c", "import os, signal; os.kill(os.getppid(), signal.SIGKILL); print('alive')"],
        [sys.executable, "-c", "import os, signal; os.kill(1, signal.SIGKILL); print('alive')"],
        [sys.executable, "-c", "import os, signal; os.killpg(0, signal.SIGKILL)"],
        ["sh", "-c", "kill -9 -1; echo after"],
    ],
    ids=["kill-parent", "kill-pid-1", "killpg", "kill-all"],
)
async def test_signalling_the_parent_leaves_the_host_alive(sandbox, argv):
    host_pid = os.getpid()
    result = await sandbox.run(argv)
    assert not result.timed_out
    assert os.getpid() == host_pid  # this process (and its event loop) is still here
    await still_works(sandbox)


async def test_host_processes_are_invisible(sandbox):
    result = await sandbox.run_python(
        "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    pids = [int(p) for p in result.stdout.strip("[]\n").split(",")]
    # Only the sandbox's init and the program (and the launcher it replaced) are visible.
    assert pids and all(pid < 10 for pid in pids)


async def test_files_outside_the_binds_cannot_be_read(sandbox, tmp_path):
    secret = f"secret-{uuid.uuid4().hex}"
    in_tmp = tmp_path / "secret.txt"
    in_tmp.write_text(secret)
    with tempfile.NamedTemporaryFile("w", dir=Path.home(), prefix="sandbox-secret-", delete=False) as handle:
        handle.write(secret)
        in_home = Path(handle.name)
    try:
        paths = [str(in_tmp), str(in_home), str(REPO / "pyproject.toml"), "/etc/shadow", "/etc/passwd"]
        code = textwrap.dedent(
            f"""
            for path in {paths!r}:
                try:
                    print("read", path, open(path).read()[:40])
                except OSError as exc:
                    print("refused", path, type(exc).__name__)
            """
        )
        result = await sandbox.run_python(code)
        assert result.exit_code == 0
        assert secret not in result.stdout
        for path in paths:
            assert f"refused {path}" in result.stdout
    finally:
        in_home.unlink()


async def test_filling_the_disk_hits_the_file_size_limit_and_a_bounded_tmpfs(sandbox):
    code = textwrap.dedent(
        """
        import os
        chunk = b"x" * (256 << 10)
        try:
            with open("big", "wb") as handle:
                for _ in range(64):
                    handle.write(chunk)
            print("big file written")
        except OSError as exc:
            print("big file refused", exc.errno)
        for base in (".", "/tmp", "/dev/shm"):
            written = 0
            try:
                for i in range(100):
                    with open(f"{base}/part{i}", "wb") as handle:
                        for _ in range(4):
                            handle.write(chunk)
                    written += 1
            except OSError as exc:
                print(base, "full after", written, exc.errno)
        """
    )
    limits = SandboxLimits(file_size_mb=2, disk_mb=8, wall_seconds=20)
    result = await sandbox.run_python(code, limits=limits)
    assert "big file refused 27" in result.stdout  # EFBIG at 2 MiB
    for base in (".", "/tmp", "/dev/shm"):
        line = next(line for line in result.stdout.splitlines() if line.startswith(f"{base} full after"))
        assert int(line.split()[3]) <= 8 and line.endswith(" 28")  # ENOSPC within 8 MiB of 1 MiB files


async def test_printing_gigabytes_is_capped_and_stopped(sandbox):
    limits = SandboxLimits(max_output_bytes=100_000, wall_seconds=120, cpu_seconds=120)
    code = "import sys\nblock = 'x' * 65536\nfor _ in range(50000):\n    sys.stdout.write(block)\n"
    result = await sandbox.run_python(code, limits=limits)
    # Stopped for its output long before the generous time limits.
    assert result.truncated and not result.timed_out and result.reason == "output limit"
    assert len(result.stdout) == 100_000 and result.exit_code is None
    err = await sandbox.run_python(code.replace("stdout", "stderr"), limits=limits)
    assert err.truncated and len(err.stderr) == 100_000
    await still_works(sandbox)


async def test_no_privileges_inside(sandbox):
    code = textwrap.dedent(
        """
        import os
        status = open("/proc/self/status").read()
        caps = [line.split()[1] for line in status.splitlines() if line.startswith(("CapEff", "CapPrm"))]
        print(caps)
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print("unshared" if libc.unshare(0x10000000) == 0 else "refused")  # CLONE_NEWUSER
        """
    )
    result = await sandbox.run_python(code)
    assert "['0000000000000000', '0000000000000000']" in result.stdout
    assert "refused" in result.stdout
