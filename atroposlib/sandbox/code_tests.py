"""Judging a program by its tests, run in the sandbox by :mod:`atroposlib.sandbox.harness`.

:func:`run_function_tests` runs Python test snippets (``assert`` statements, HumanEval's
``check(candidate)``) against a program's definitions; :func:`run_stdio_tests` runs the program once per
stdin/stdout case. Either way the verdict is the harness's per-test report, which counts only when the
harness finished every test and reported under this run's random nonce: a program's exit status, what it
prints, or an early ``sys.exit(0)`` / ``os._exit(0)`` never make a test pass. What the report cannot
protect against is described in :mod:`atroposlib.sandbox.harness`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from atroposlib.sandbox.limits import SandboxLimits, SandboxResult
from atroposlib.sandbox.runner import Sandbox

HARNESS_FILE = "harness.py"
_HARNESS_SOURCE = (Path(__file__).with_name("harness.py")).read_text(encoding="utf-8")
_STATUS_WORDS = {"P": "passed", "F": "failed", "T": "timeout"}


@dataclass(frozen=True)
class TestReport:
    """Per-test outcomes of one program.

    ``statuses`` has one entry per test: "passed", "failed", "timeout" or "error: <ExceptionName>"
    ("error: exit<N>" for a stdin/stdout program exiting with status N). ``completed`` is False when the
    harness never reported (the program ended the run, or a limit stopped it): every test then counts as
    failed and ``failure`` says why. ``result`` is the raw sandbox result.
    """

    __test__ = False  # not a pytest test class

    statuses: list[str]
    completed: bool
    failure: Optional[str]
    result: SandboxResult

    @property
    def passed(self) -> int:
        return sum(status == "passed" for status in self.statuses)

    @property
    def total(self) -> int:
        return len(self.statuses)

    @property
    def all_passed(self) -> bool:
        return self.completed and self.total > 0 and self.passed == self.total

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def _word(status: str) -> str:
    if status in _STATUS_WORDS:
        return _STATUS_WORDS[status]
    return "error: " + status[1:] if status.startswith("E") else "failed"


def _parse(result: SandboxResult, nonce: str, count: int) -> TestReport:
    prefix = nonce + " "
    lines = [line for line in result.stdout.splitlines() if line.startswith(prefix)]
    if len(lines) == 1 and not (result.timed_out or result.truncated):
        statuses = lines[0][len(prefix) :].split("|") if count else []
        if len(statuses) == count:
            return TestReport([_word(s) for s in statuses], True, None, result)
    if result.reason:
        failure = result.reason
    else:
        failure = f"the program ended the run before the tests finished (exit status {result.exit_code})"
    return TestReport(["failed"] * count, False, failure, result)


def _limits(base: Optional[SandboxLimits], sandbox: Sandbox, seconds: float, count: int) -> SandboxLimits:
    limits = base or sandbox.limits
    # Room for every test to use its whole time, plus start-up.
    wall = min(limits.wall_seconds, seconds * (count + 1) + 5.0)
    return limits.model_copy(update={"wall_seconds": wall})


async def _run(sandbox: Sandbox, job: dict, count: int, limits: SandboxLimits) -> TestReport:
    nonce = secrets.token_hex(16)
    result = await sandbox.run(
        [sandbox.python, "-I", HARNESS_FILE],
        stdin=json.dumps({**job, "nonce": nonce}),
        files={HARNESS_FILE: _HARNESS_SOURCE},
        limits=limits,
    )
    return _parse(result, nonce, count)


async def run_function_tests(
    sandbox: Sandbox,
    program: str,
    tests: Sequence[str],
    *,
    setup_code: str = "",
    seconds_per_test: float = 5.0,
    limits: Optional[SandboxLimits] = None,
) -> TestReport:
    """Run ``program``, then ``setup_code``, then each test snippet in the same namespace, in the sandbox.

    Each step may take ``seconds_per_test``; the whole run is bounded by ``limits.wall_seconds`` (default:
    the sandbox's limits). Raises :class:`~atroposlib.sandbox.SandboxError` if the sandbox cannot start.
    """
    job = {
        "mode": "function",
        "program": program,
        "setup": setup_code,
        "tests": list(tests),
        "seconds": seconds_per_test,
    }
    return await _run(sandbox, job, len(tests), _limits(limits, sandbox, seconds_per_test, len(tests)))


async def run_stdio_tests(
    sandbox: Sandbox,
    program: str,
    cases: Sequence[tuple[str, str]],
    *,
    seconds_per_test: float = 5.0,
    limits: Optional[SandboxLimits] = None,
) -> TestReport:
    """Run ``program`` once per ``(stdin, expected stdout)`` case in the sandbox and compare its output.

    Outputs match when equal up to trailing whitespace, or token by token with decimals within 1e-6
    (:func:`atroposlib.sandbox.harness.same_output`). Raises :class:`~atroposlib.sandbox.SandboxError` if
    the sandbox cannot start.
    """
    job = {
        "mode": "stdio",
        "program": program,
        "cases": [{"input": given, "output": expected} for given, expected in cases],
        "seconds": seconds_per_test,
    }
    return await _run(sandbox, job, len(cases), _limits(limits, sandbox, seconds_per_test, len(cases)))
