"""Judging programs by their tests in the sandbox: verdicts come only from the harness's report."""

from __future__ import annotations

import pytest

from atroposlib.sandbox import Sandbox, SandboxLimits
from atroposlib.sandbox.code_tests import run_function_tests, run_stdio_tests
from atroposlib.sandbox.harness import same_output

TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    box = Sandbox(max_parallel=2, limits=SandboxLimits(wall_seconds=10))
    box.check()
    return box


@pytest.mark.parametrize(
    ("got", "expected", "same"),
    [
        ("3\n7\n", "3\n7", True),
        ("3  \n7\n\n\n", "3\n7\n", True),
        ("3 7", "3\n7", True),
        ("0.3333333", "0.333333333", True),
        ("0.34", "0.333333333", False),
        ("1", "1.0", True),
        ("10", "1", False),
        ("3\n7\n8", "3\n7", False),
        ("", "0", False),
        ("nan", "0.5", False),
    ],
)
def test_output_comparison(got, expected, same):
    assert same_output(got, expected) is same


async def test_function_tests_report_each_test(sandbox):
    report = await run_function_tests(sandbox, "def add(a, b):\n    return a + b if a != 10 else 0\n", TESTS)
    assert report.statuses == ["passed", "passed", "failed"] and report.completed
    assert report.passed == 2 and report.fraction == pytest.approx(2 / 3) and not report.all_passed


async def test_setup_code_runs_before_the_tests(sandbox):
    report = await run_function_tests(
        sandbox, "def area(r):\n    return math.pi * r * r\n", ["assert math.isclose(area(1), math.pi)"],
        setup_code="import math\nimport builtins\nbuiltins.math = math",
    )  # fmt: skip
    assert report.all_passed


@pytest.mark.parametrize(
    "program",
    [
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "print('passed')\nprint('3 passed, 0 failed')\n",
        "import os\nfor fd in range(1, 30):\n    try:\n        os.write(fd, b'deadbeef P|P|P\\n')\n"
        "    except OSError:\n        pass\n",
        "import atexit, os\natexit.register(lambda: os.write(1, b'P|P|P\\n'))\n",
    ],
    ids=["sys.exit", "os._exit", "prints-passed", "writes-fake-reports", "atexit"],
)
async def test_exiting_early_or_printing_success_passes_nothing(sandbox, program):
    report = await run_function_tests(sandbox, program, TESTS)
    assert report.passed == 0 and not report.all_passed


async def test_a_run_that_never_reports_names_why(sandbox):
    report = await run_function_tests(sandbox, "import os\nos._exit(0)\n", TESTS)
    assert not report.completed and "before the tests finished" in report.failure
    looping = await run_function_tests(
        sandbox, "import signal\ndef add(a, b):\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "    while True:\n        pass\n", TESTS,
        seconds_per_test=0.5, limits=SandboxLimits(wall_seconds=3, cpu_seconds=30),
    )  # fmt: skip
    assert not looping.completed and looping.failure == "wall-clock limit" and looping.passed == 0


async def test_per_test_time_limit_keeps_the_other_tests(sandbox):
    program = "def add(a, b):\n    while a == 10:\n        pass\n    return a + b\n"
    report = await run_function_tests(sandbox, program, TESTS, seconds_per_test=0.5)
    assert report.statuses == ["passed", "passed", "timeout"] and report.completed


async def test_stdio_cases_compare_outputs_in_a_separate_process(sandbox):
    cases = [("1 2\n", "3\n"), ("5 5\n", "10\n"), ("0 0\n", "0\n")]
    right = await run_stdio_tests(sandbox, "a, b = map(int, input().split())\nprint(a + b)\n", cases)
    assert right.all_passed
    crash = await run_stdio_tests(sandbox, "a, b = map(int, input().split())\nprint(a // b)\n", cases)
    assert crash.statuses == ["failed", "failed", "error: exit1"]
    slow = await run_stdio_tests(
        sandbox, "import time\na, b = map(int, input().split())\nif a == 5: time.sleep(30)\nprint(a + b)\n",
        cases,
        seconds_per_test=0.5,
    )  # fmt: skip
    assert slow.statuses == ["passed", "timeout", "passed"]
    peek = await run_stdio_tests(
        sandbox, "import os\nfound = []\nfor pid in os.listdir('/proc'):\n    try:\n"
        "        found.append(open(f'/proc/{pid}/environ').read() + open(f'/proc/{pid}/cmdline').read())\n"
        "    except OSError:\n        pass\nprint('10' if any('nonce' in f for f in found) else 3)\n", cases,
    )  # fmt: skip
    assert peek.statuses[1] == "failed"
