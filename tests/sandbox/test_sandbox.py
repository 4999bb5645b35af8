"""The sandbox's normal path: output, exit status, stdin, files, parallel runs, limits, start-up errors."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from atroposlib.sandbox import WORK_DIR, Sandbox, SandboxError, SandboxLimits
from atroposlib.sandbox.bubblewrap import build_command, find_tools
from tests.helpers.event_loop import count_ticks


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    box = Sandbox(max_parallel=4, limits=SandboxLimits(wall_seconds=10))
    box.check()
    return box


async def test_stdout_stderr_exit_code_stdin_and_files(sandbox):
    code = (
        "import os, sys\n"
        "name = input()\n"
        "print('hello', name, open('data.txt').read().strip(), os.getcwd())\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    result = await sandbox.run_python(code, stdin="sandbox\n", files={"data.txt": "äöü data\n"})
    assert result.stdout == f"hello sandbox äöü data {WORK_DIR}\n"
    assert result.stderr == "to stderr\n"
    assert result.exit_code == 3 and result.reason == "exit status 3"
    assert not result.timed_out and not result.truncated and not result.ok
    assert result.duration_s > 0


async def test_clean_exit_has_no_reason(sandbox):
    result = await sandbox.run(["sh", "-c", "cat; echo done >&2"], stdin="piped")
    assert (result.stdout, result.stderr, result.exit_code, result.reason) == ("piped", "done\n", 0, None)
    assert result.ok


async def test_work_directory_is_writable_and_private_per_run(sandbox):
    first = await sandbox.run_python(
        "open('note', 'w').write('x'); print(sorted(__import__('os').listdir()))"
    )
    second = await sandbox.run_python("import os; print(sorted(os.listdir()))")
    assert first.stdout == "['main.py', 'note']\n"
    assert second.stdout == "['main.py']\n"


async def test_killed_by_signal_is_reported(sandbox):
    result = await sandbox.run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert result.exit_code == -11 and result.reason == "killed by signal 11"


async def test_unknown_command_is_a_program_failure_not_a_sandbox_error(sandbox):
    result = await sandbox.run(["no-such-command-here"])
    assert result.exit_code == 127


async def test_runs_overlap_up_to_max_parallel():
    code = "import json, time\nstart = time.time()\ntime.sleep(2)\nprint(json.dumps([start, time.time()]))\n"
    parallel = Sandbox(max_parallel=4)
    spans = [
        json.loads(r.stdout) for r in await asyncio.gather(*(parallel.run_python(code) for _ in range(4)))
    ]
    # Every program started before any of them ended: all four ran at the same time.
    assert max(start for start, _ in spans) < min(end for _, end in spans)

    serial = Sandbox(max_parallel=1)
    spans = [json.loads(r.stdout) for r in await asyncio.gather(*(serial.run_python(code) for _ in range(3)))]
    spans.sort()
    # One slot: each program started after the previous one ended.
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))


async def test_event_loop_is_not_blocked_while_programs_run(sandbox):
    async with count_ticks(0.05) as ticks:
        await sandbox.run_python("import time; time.sleep(1)")
    assert ticks.count >= 5


async def test_bad_arguments_are_rejected(sandbox):
    with pytest.raises(ValueError):
        await sandbox.run([])
    with pytest.raises(ValueError, match="bad file name"):
        await sandbox.run_python("pass", files={"../escape.py": "x"})
    with pytest.raises(ValidationError):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(ValidationError):
        SandboxLimits(wall_second=3)


def test_missing_bwrap_on_path_is_a_sandbox_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match="bwrap"):
        Sandbox().check()


async def test_configured_bwrap_path_that_does_not_exist(tmp_path):
    box = Sandbox(bwrap_path=str(tmp_path / "bin" / "bwrap"))
    with pytest.raises(SandboxError, match="bubblewrap not found at"):
        box.check()
    with pytest.raises(SandboxError, match="bubblewrap not found at"):
        await box.run_python("print(1)")


async def test_refused_namespaces_are_a_sandbox_error_naming_the_cause(tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    box = Sandbox(bwrap_path=str(fake))
    with pytest.raises(SandboxError, match="No permissions to creating new namespace"):
        box.check()
    with pytest.raises(SandboxError, match="failed to start"):
        await box.run_python("print(1)")


async def test_a_program_printing_like_bwrap_is_not_a_sandbox_error(sandbox):
    result = await sandbox.run(["sh", "-c", "echo 'bwrap: Creating new namespace failed' >&2; exit 1"])
    assert result.exit_code == 1


def test_check_works_inside_a_running_event_loop(sandbox):
    async def main():
        sandbox.check()
        return "checked"

    assert asyncio.run(main()) == "checked"


def test_command_line_for_a_non_root_caller_is_one_bwrap():
    tools = find_tools(as_root=False)
    command = build_command(
        tools,
        ["python3", "main.py"],
        SandboxLimits(max_processes=7, memory_mb=100),
        started_fd=9,
        files={"main.py": 10},
        extra_paths=[],
        env={"PATH": "/usr/bin"},
        uid=None,
    )
    assert command[0] == tools.bwrap and command.count(tools.bwrap) == 1
    assert "setpriv" not in " ".join(command)
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent"):
        assert flag in command
    limits = command[command.index(tools.prlimit) :]
    assert "--nproc=7:7" in limits and f"--as={100 << 20}:{100 << 20}" in limits
    assert command[-2:] == ["python3", "main.py"]


def test_command_line_for_root_switches_to_the_slot_user():
    tools = find_tools(as_root=True)
    command = build_command(
        tools,
        ["true"],
        SandboxLimits(),
        started_fd=9,
        files={},
        extra_paths=[],
        env={},
        uid=1234567,
    )
    switch = command.index(tools.setpriv)
    assert command[switch + 1 : switch + 3] == ["--reuid=1234567", "--regid=1234567"]
    inner = command.index(tools.bwrap, switch)
    assert "--unshare-user" in command[inner:] and "--unshare-user" not in command[:switch]


async def test_allow_unsandboxed_runs_plainly_and_says_so_loudly(caplog, tmp_path):
    with caplog.at_level(logging.ERROR, logger="atroposlib.sandbox.runner"):
        box = Sandbox(allow_unsandboxed=True, bwrap_path=str(tmp_path / "missing"))
    assert "WITHOUT isolation" in caplog.text
    box.check()  # nothing to check
    result = await box.run_python("import os; print(open('f').read(), os.getpid() > 2)", files={"f": "data"})
    assert result.stdout == "data True\n" and result.exit_code == 0
    looped = await box.run_python("while True: pass", limits=SandboxLimits(wall_seconds=1, cpu_seconds=30))
    assert looped.timed_out and looped.reason == "wall-clock limit"


def test_python_inside_is_this_interpreter(sandbox):
    async def main():
        return await sandbox.run_python("import sys; print(sys.version)")

    assert asyncio.run(main()).stdout.strip() == sys.version
    assert os.path.isabs(sandbox.python) and Path(sandbox.python).exists()


async def test_a_virtualenv_under_the_hosts_tmp_is_usable(tmp_path):
    """Its binds lie under the sandbox's private /tmp and are bound again on top of it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    box = Sandbox(python=str(venv / "bin" / "python"))
    box.check()
    result = await box.run_python("import sys; print(sys.prefix)")
    assert result.exit_code == 0 and result.stdout.strip() == str(venv)
    writable = await box.run_python(f"open({str(venv / 'x')!r}, 'w')")
    assert writable.exit_code == 1 and "Read-only file system" in writable.stderr


#: Character devices a host usually has and the sandbox's own /dev lacks (standing in for /dev/nvidia*).
_HOST_ONLY_DEVICES = ("/dev/fuse", "/dev/kmsg", "/dev/loop-control", "/dev/tty0")

_DEVICE_PROBE = """
import os, stat, sys
for path in sys.argv[1:]:
    print(path, os.path.exists(path) and stat.S_ISCHR(os.stat(path).st_mode))
"""


async def test_devices_are_usable_only_when_given(sandbox):
    device = next((d for d in _HOST_ONLY_DEVICES if os.path.exists(d)), None)
    assert device is not None, f"this host has none of {_HOST_ONLY_DEVICES} to test device binds with"
    missing = "/dev/nvidia-not-on-this-host"
    plain = await sandbox.run([sandbox.python, "-c", _DEVICE_PROBE, device])
    assert plain.exit_code == 0 and plain.stdout.split() == [device, "False"]
    with_device = Sandbox(2, devices=[device, missing])
    given = await with_device.run([with_device.python, "-c", _DEVICE_PROBE, device, missing])
    assert given.exit_code == 0, given.stderr
    assert given.stdout.split() == [device, "True", missing, "False"]  # a node the host lacks is left out
