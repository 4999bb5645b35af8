"""The test harness that runs inside the sandbox: a standalone script (standard library only).

It reads one job as JSON on stdin: ``{"nonce", "mode", "program", "tests" | "cases", "setup", "seconds"}``,
runs every test and writes one line ``<nonce> <status>|<status>|...`` to the stdout it was started with,
after the last test and only then. Statuses: ``P`` passed, ``F`` failed (assertion or wrong output),
``T`` timed out, ``E<Name>`` raised ``Name`` (``Eexit<N>`` for a program that exited with status N).

* ``mode = "function"``: the program is executed in a fresh namespace in this interpreter, then ``setup``,
  then each test (Python source: an ``assert``, or HumanEval's ``check(candidate)``) with a per-test alarm.
  The program's prints go to stderr; ``SystemExit`` counts as a failed test; ``os._exit`` ends the run
  without the report line, so nothing counts.
* ``mode = "stdio"``: the program runs as a separate process per case (stdin from the case's input,
  stdout to a file) and its output is compared here, in a process it cannot read (not dumpable).

Forging: the nonce is random per run and never written where the program can read it; the report line
goes to a descriptor the program's prints do not reach. A stdin/stdout program runs in another process
and cannot learn the nonce. A function program shares this interpreter, so one that deliberately
inspects the harness (its frames, objects or memory) or redefines what the tests rely on (e.g. returns
an object equal to everything) is not caught; printing "passed", exiting early or raising ``SystemExit``
is.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile

PROGRAM_NAME = "solution.py"


class _TestTimeout(BaseException):
    """Raised by the alarm inside a test that ran past its time."""


def _on_alarm(signum, frame):
    raise _TestTimeout()


def _status_of(exc: BaseException) -> str:
    if isinstance(exc, _TestTimeout):
        return "T"
    if isinstance(exc, AssertionError):
        return "F"
    name = type(exc).__name__
    return "E" + "".join(c for c in str(name)[:40] if c.isalnum() or c == "_")


def same_output(got: str, expected: str) -> bool:
    """Whether a program's output matches the expected output.

    Equal after stripping trailing whitespace of every line and trailing blank lines; otherwise equal
    token by token, where a token of the expected output holding a decimal point matches a number within
    1e-6 (absolute or relative).
    """
    got_lines = [line.rstrip() for line in got.rstrip().splitlines()]
    expected_lines = [line.rstrip() for line in expected.rstrip().splitlines()]
    if got_lines == expected_lines:
        return True
    got_tokens, expected_tokens = got.split(), expected.split()
    if len(got_tokens) != len(expected_tokens):
        return False
    for mine, theirs in zip(got_tokens, expected_tokens, strict=True):
        if mine == theirs:
            continue
        if "." not in theirs:
            return False
        try:
            a, b = float(mine), float(theirs)
        except ValueError:
            return False
        if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6):
            return False
    return True


def _function_tests(job: dict, timed) -> list[str]:
    namespace = {"__name__": "__solution__", "__builtins__": __builtins__}
    tests = job["tests"]
    _exec, _compile = exec, compile
    program_status = timed(lambda: _exec(_compile(job["program"], PROGRAM_NAME, "exec"), namespace))
    if program_status != "P":
        return [program_status] * len(tests)
    if job.get("setup"):
        setup_status = timed(lambda: _exec(_compile(job["setup"], "setup.py", "exec"), namespace))
        if setup_status != "P":
            return [setup_status] * len(tests)
    return [
        timed(lambda source=source, i=i: _exec(_compile(source, f"test_{i}.py", "exec"), namespace))
        for i, source in enumerate(tests)
    ]


def _no_dump() -> None:
    # Processes of the same user (the program under test) can then not read this one's memory or fds.
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def _stdio_tests(job: dict) -> list[str]:
    _no_dump()
    with open(PROGRAM_NAME, "w", encoding="utf-8") as handle:
        handle.write(job["program"])
    statuses = []
    for case in job["cases"]:
        with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out:
            given.write(case["input"].encode("utf-8"))
            given.seek(0)
            process = subprocess.Popen(
                [sys.executable, PROGRAM_NAME],
                stdin=given,
                stdout=out,
                stderr=None,
                start_new_session=True,
            )
            try:
                code = process.wait(timeout=job["seconds"])
            except subprocess.TimeoutExpired:
                code = None
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
            process.wait()
            if code is None:
                statuses.append("T")
                continue
            if code != 0:
                statuses.append(f"Eexit{code}")
                continue
            out.seek(0)
            got = out.read().decode("utf-8", errors="replace")
        statuses.append("P" if same_output(got, case["output"]) else "F")
    return statuses


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    nonce = job.pop("nonce")
    # The report goes to the original stdout; from here on fd 1 is stderr and stdin is empty.
    channel = os.dup(1)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _write, _exit, _join = os.write, os._exit, "|".join
    flushes = (sys.stdout.flush, sys.stderr.flush)

    def report(statuses: list[str]) -> None:
        for flush in flushes:
            try:
                flush()  # what the program printed, for the caller's logs
            except BaseException:  # noqa: BLE001
                pass
        _write(channel, f"{nonce} {_join(statuses)}\n".encode())
        _exit(0)

    seconds = float(job["seconds"])
    # Held as locals: the program can rebind module attributes, not this function's variables.
    _setitimer, _signal, _real, _sigalrm = signal.setitimer, signal.signal, signal.ITIMER_REAL, signal.SIGALRM
    on_alarm, status_of = _on_alarm, _status_of

    def timed(run) -> str:
        _signal(_sigalrm, on_alarm)
        _setitimer(_real, seconds)
        try:
            run()
            status = "P"
        except BaseException as exc:  # noqa: BLE001 - SystemExit and the alarm are test outcomes too
            status = status_of(exc)
        finally:
            _setitimer(_real, 0)
        return status

    if job["mode"] == "function":
        report(_function_tests(job, timed))
    else:
        report(_stdio_tests(job))


if __name__ == "__main__":
    main()
