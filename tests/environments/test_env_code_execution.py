"""The code execution environment: schemas, sandboxed judging, hostile programs, ``process``, ``evaluate``."""

from __future__ import annotations

import asyncio
import os
import socket
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from atroposlib.envs.cli import parse_command
from atroposlib.envs.data_loading import DatasetError
from atroposlib.sandbox import SandboxError
from environments.code_execution_server import (
    CodeProblem,
    CodingEnv,
    humaneval_rows,
)
from tests.helpers.cli_runs import ENVIRONMENTS, FIXTURES, read_jsonl, run_env
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, write_jsonl

MBPP = FIXTURES / "mbpp_sample.jsonl"
HUMANEVAL = FIXTURES / "humaneval_sample.jsonl"
STDIO = FIXTURES / "stdio_sample.jsonl"
REPO = Path(__file__).resolve().parents[2]

# Right answers written differently from the fixtures' reference solutions, keyed by a phrase of the prompt.
RIGHT = {
    "sum of the squares of the digits": (
        "def digit_square_sum(n):\n    total = 0\n    while n:\n        n, d = divmod(n, 10)\n"
        "        total += d * d\n    return total\n"
    ),
    "words of a sentence in reverse order": "def reverse_words(s):\n    return ' '.join(s.split()[::-1])\n",
    "area of a circle": "from math import pi\n\ndef circle_area(r):\n    return pi * r ** 2\n",
    "count_vowels": (
        "def count_vowels(text):\n    n = 0\n    for ch in text:\n        if ch in 'aeiouAEIOU':\n"
        "            n += 1\n    return n\n"
    ),
    "running_max": (
        "from itertools import accumulate\n\n"
        "def running_max(values):\n    return list(accumulate(values, max))\n"
    ),
    "For every pair print a + b": (
        "import sys\ndata = sys.stdin.read().split()\nt = int(data[0])\n"
        "print('\\n'.join(str(int(data[1 + 2 * i]) + int(data[2 + 2 * i])) for i in range(t)))\n"
    ),
    "Print the longest word": "words = input().split()\nprint(max(words, key=len))\n",
}
WRONG = {
    "sum of the squares of the digits": "def digit_square_sum(n):\n    return sum(int(d) for d in str(n))\n",
    "words of a sentence in reverse order": "def reverse_words(s):\n    return s[::-1]\n",
    "area of a circle": "def circle_area(r):\n    return 3.14 * r * r\n",
    "count_vowels": "def count_vowels(text):\n    return len(text)\n",
    "running_max": "def running_max(values):\n    return sorted(values)\n",
    "For every pair print a + b": "print(3)\nprint(7)\n",
    "Print the longest word": "print(input().split()[-1])\n",
}


def reply(code: str) -> str:
    return f"<think>Let me write it.</think>Here is my solution:\n```python\n{code}```\n"


def key_of(text: str) -> str:
    return next(key for key in RIGHT if key in text)


def make_env(tiny_model_dir, **overrides) -> CodingEnv:
    return offline_env(
        CodingEnv,
        tiny_model_dir,
        **{
            "group_size": 4,
            "dataset_path": str(MBPP),
            "max_token_length": 1024,
            "seconds_per_test": 1.0,
            "wall_seconds": 6.0,
            **overrides,
        },
    )


@pytest.fixture(scope="module")
def problems(tiny_model_dir) -> dict[str, CodeProblem]:
    """Every fixture problem by its key in RIGHT, from an env set up on each fixture."""
    found = {}
    for path in (MBPP, HUMANEVAL, STDIO):
        env = make_env(tiny_model_dir, dataset_path=str(path), eval_dataset_path=str(path))
        asyncio.run(env.setup())
        for problem in env.train:
            found[key_of(problem.statement)] = problem
    return found


@pytest.fixture(scope="module")
def env(tiny_model_dir) -> CodingEnv:
    env = make_env(tiny_model_dir, eval_dataset_path=str(HUMANEVAL))
    asyncio.run(env.setup())
    return env


# -- data ----------------------------------------------------------------------------------------------------


async def test_the_three_schemas_are_read_from_their_fields(problems):
    mbpp = problems["sum of the squares of the digits"]
    assert (
        mbpp.kind == "function"
        and len(mbpp.tests) == 3
        and "assert digit_square_sum(12) == 5" in mbpp.statement
    )
    assert problems["area of a circle"].setup_code == "import math"
    humaneval = problems["count_vowels"]
    assert humaneval.kind == "function" and humaneval.preamble.startswith("def count_vowels")
    assert humaneval.tests[0].rstrip().endswith("check(count_vowels)")
    stdio = problems["For every pair print a + b"]
    assert stdio.kind == "stdio" and len(stdio.cases) == 3  # public + private + generated
    assert len(problems["Print the longest word"].cases) == 3


async def test_default_evaluation_set_is_humaneval_from_the_package(tiny_model_dir):
    env = make_env(tiny_model_dir)
    await env.setup()
    assert len(env.test) == len(humaneval_rows()) == 164
    assert env.test[0].task_id == "HumanEval/0" and env.test[0].kind == "function"


async def test_default_training_set_is_code_contests_from_the_hub(tiny_model_dir, monkeypatch):
    calls = []

    def fake_load_dataset(name, config=None, split=None, **kwargs):
        calls.append((name, config, split))
        return read_jsonl(STDIO)

    monkeypatch.setattr("datasets.load_dataset", fake_load_dataset)
    env = make_env(tiny_model_dir, dataset_path=None)
    await env.setup()
    assert calls == [("deepmind/code_contests", None, "train")]
    assert {p.kind for p in env.train} == {"stdio"}


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"question": "q"}], "unknown schema"),
        ([{"task_id": 1, "test_list": ["assert True"]}], "row 0: missing field 'text'"),
        ([{"description": "d", "public_tests": {"input": ["1"], "output": []}}], "1 inputs but 0 outputs"),
        ([{"description": "d", "public_tests": {"input": [], "output": []}}], "no row has a test case"),
        (
            [{"task_id": "a", "prompt": "def f(): pass", "test": "", "entry_point": "f"}],
            "field 'test' must be a non-empty string",
        ),
    ],
)
async def test_bad_rows_name_the_file_row_and_field(tiny_model_dir, tmp_path, rows, message):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    env = make_env(tiny_model_dir, dataset_path=path, eval_dataset_path=str(HUMANEVAL))
    with pytest.raises(DatasetError, match=message):
        await env.setup()


async def test_setup_stops_when_the_sandbox_cannot_run(tiny_model_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    env = make_env(tiny_model_dir)
    with pytest.raises(SandboxError, match="code execution needs the sandbox.*bwrap"):
        await env.setup()


def test_process_reports_a_missing_sandbox_in_one_line(tmp_path, tiny_model_dir):
    result = run_env(
        ENVIRONMENTS / "code_execution_server.py",
        ["process", "--env.dataset_path", MBPP, "--env.tokenizer_name", tiny_model_dir,
         "--env.use_wandb", "false",
         "--openai.base_url", "http://127.0.0.1:9/v1", "--openai.model_name", "m"],
        cwd=tmp_path,
        env={**os.environ, "PATH": str(tmp_path)},
        timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "code execution needs the sandbox" in last and "bwrap" in last


# -- judging -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", list(RIGHT))
async def test_right_solutions_written_differently_pass(env, problems, key):
    verdict = await env.judge(reply(RIGHT[key]), problems[key])
    assert verdict.score == 1.0 and verdict.all_passed and verdict.failure is None


@pytest.mark.parametrize("key", list(WRONG))
async def test_wrong_solutions_fail(env, problems, key):
    verdict = await env.judge(reply(WRONG[key]), problems[key])
    assert verdict.score == 0.0 and not verdict.all_passed and verdict.failure.startswith("test ")


async def test_humaneval_reply_may_be_just_the_body(env, problems):
    body = "    return sum(c in 'aeiouAEIOU' for c in text)\n"
    assert (await env.judge(reply(body), problems["count_vowels"])).score == 1.0


async def test_reference_solutions_pass(env, problems):
    for row in read_jsonl(MBPP):
        problem = next(p for p in problems.values() if p.task_id == str(row["task_id"]))
        assert (await env.judge(reply(row["code"].replace("\r\n", "\n")), problem)).score == 1.0
    for row in read_jsonl(HUMANEVAL):
        assert (await env.judge(reply(row["canonical_solution"]), problems[row["entry_point"]])).score == 1.0


async def test_no_code_block_scores_zero(env, problems):
    verdict = await env.judge("The answer is obvious.", problems["area of a circle"])
    assert verdict.score == 0.0 and verdict.failure == "no python code block"
    unclosed = "<think>```python\ndef circle_area(r): return 3.14159 * r * r\n```"
    assert (await env.judge(unclosed, problems["area of a circle"])).failure == "no python code block"


async def test_partial_credit_rewards_the_fraction_passed(tiny_model_dir, problems):
    env = make_env(tiny_model_dir, partial_credit=True, eval_dataset_path=str(HUMANEVAL))
    await env.setup()
    half_right = "def reverse_words(s):\n    return s\n"  # right only for the one-word test
    verdict = await env.judge(reply(half_right), problems["words of a sentence in reverse order"])
    assert verdict.score == pytest.approx(1 / 3) and verdict.passed == 1 and verdict.total == 3
    stdio = "print(input().split()[0])\n"  # right on 'a bb cc'? no: on 'single' only
    verdict = await env.judge(reply(stdio), problems["Print the longest word"])
    assert verdict.score == pytest.approx(1 / 3)


SECRET = f"secret-{uuid.uuid4().hex}"

# Hostile "solutions": each must score 0 and leave the env able to judge the next reply.
HOSTILE = {
    "infinite loop": "def digit_square_sum(n):\n    while True:\n        pass\n",
    "infinite loop at import": "while True:\n    pass\n",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "8 GiB": "block = bytearray(8 << 30)\ndef digit_square_sum(n):\n    return 0\n",
    "kill the parent": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.killpg(0, signal.SIGKILL)\n"
    ),
    "kill everything": "import os\nos.system('kill -9 -1')\n",
    "fill the disk": (
        "i = 0\nwhile True:\n    try:\n        open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n"
        "    except OSError:\n"
        "        break\n    i += 1\ndef digit_square_sum(n):\n    return -1\n"
    ),
    "print gigabytes": "import sys\nwhile True:\n    sys.stdout.write('passed ' * 10000)\n",
    "sys.exit(0) before the tests": "import sys\nsys.exit(0)\n",
    "os._exit(0) before the tests": "import os\nos._exit(0)\n",
    "prints passed": "print('passed')\nprint('All tests passed: 3/3')\n",
    "prints a report line": "import sys\nfor fd in range(3, 20):\n    try:\n        import os\n"
    "        os.write(fd, b'0' * 32 + b' P|P|P\\n')\n    except OSError:\n        pass\nprint('x P|P|P')\n",
    "exits 0 from inside a test": "import os\ndef digit_square_sum(n):\n    os._exit(0)\n",
    "SystemExit from inside a test": "def digit_square_sum(n):\n    raise SystemExit(0)\n",
    "atexit forges": "import atexit\natexit.register(lambda: print('passed'))\n",
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_hostile_solutions_score_zero_and_the_env_carries_on(env, problems, name):
    problem = problems["sum of the squares of the digits"]
    verdict = await env.judge(reply(HOSTILE[name]), problem)
    assert verdict.score == 0.0 and verdict.passed == 0 and verdict.failure
    assert (await env.judge(reply(RIGHT["sum of the squares of the digits"]), problem)).score == 1.0


async def test_hostile_stdio_solutions_score_zero(env, problems):
    problem = problems["For every pair print a + b"]
    for code in (HOSTILE["sys.exit(0) before the tests"], HOSTILE["kill everything"],
                 HOSTILE["print gigabytes"],
                 "print('3\\n7')\n"):  # fmt: skip
        verdict = await env.judge(reply(code), problem)
        assert verdict.score == 0.0, code
    assert (await env.judge(reply(RIGHT["For every pair print a + b"]), problem)).score == 1.0


async def test_time_outs_and_crashes_keep_their_reason(env, problems):
    problem = problems["sum of the squares of the digits"]
    looping = await env.judge(reply(HOSTILE["infinite loop"]), problem)
    assert looping.failure == "test 1: timeout"
    crash = await env.judge(reply("def digit_square_sum(n):\n    return n / 0\n"), problem)
    assert crash.failure == "test 1: error: ZeroDivisionError"
    early = await env.judge(reply(HOSTILE["os._exit(0) before the tests"]), problem)
    assert "ended the run before the tests finished" in early.failure
    flood = await env.judge(reply(HOSTILE["print gigabytes"]), problem)
    assert flood.failure == "output limit"


async def test_solutions_see_neither_host_files_nor_the_network(env, problems, tmp_path):
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(SECRET)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = textwrap.dedent(
        f"""
        import socket
        def digit_square_sum(n):
            found = []
            for path in ({str(secret_file)!r}, {str(REPO / "pyproject.toml")!r}):
                try:
                    found.append(open(path).read())
                except OSError:
                    pass
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1)
                found.append("net")
            except OSError:
                pass
            try:
                open({str(REPO / "escaped.txt")!r}, "w").write("x")
                found.append("wrote")
            except OSError:
                pass
            assert not found, found
            return sum(int(d) ** 2 for d in str(n))
        """
    )
    try:
        verdict = await env.judge(reply(code), problems["sum of the squares of the digits"])
        assert verdict.score == 1.0  # nothing was found, so its own assert held
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert not (REPO / "escaped.txt").exists()


# -- process and evaluate ------------------------------------------------------------------------------------


def mixed_responder(prompt: Any, index: int) -> str:
    """Right answers for even choice indices, wrong ones (and one early exit) for odd ones."""
    key = key_of(prompt_text(prompt))
    if index % 2 == 0:
        return reply(RIGHT[key])
    return reply(WRONG[key] if index == 1 else HOSTILE["os._exit(0) before the tests"])


@pytest.mark.parametrize(("path", "count"), [(MBPP, 3), (HUMANEVAL, 2), (STDIO, 2)])
def test_process_with_the_local_fixtures(scripted, path, count):
    args = ["--env.dataset_path", path, "--env.eval_dataset_path", path, "--env.group_size", 4]
    args += ["--env.total_steps", count, "--env.max_token_length", 2048, "--env.seconds_per_test", 3]
    groups = scripted.process(CodingEnv, args, mixed_responder)
    check_groups(groups, count, [0.0, 0.0, 1.0, 1.0])
    seen = set()
    for group in groups:
        for messages, score, override in zip(
            group["messages"], group["scores"], group["overrides"], strict=True
        ):
            key = key_of(messages[1]["content"])
            seen.add(key)
            meta = override["code_execution"]
            if score == 1.0:
                assert RIGHT[key] in messages[-1]["content"]
                assert meta["failure"] is None and meta["tests_passed"] == meta["tests_total"] > 0
            else:
                assert meta["failure"] and meta["tests_passed"] < meta["tests_total"]
        early = [
            override["code_execution"]
            for messages, override in zip(group["messages"], group["overrides"], strict=True)
            if "os._exit(0)" in messages[-1]["content"]
        ]
        assert len(early) == 1 and early[0]["tests_passed"] == 0 and early[0]["failure"]
    assert len(seen) == count


def humaneval_responder(prompt: Any, index: int) -> str:
    """HumanEval's own solutions for its first three problems, a wrong one for the fourth."""
    text = prompt_text(prompt)
    for row in humaneval_rows()[:3]:
        if row["prompt"].rstrip() in text:
            return reply(row["prompt"] + row["canonical_solution"])
    return reply("def nothing():\n    return None\n")


def test_evaluate_reports_pass_at_1_on_humaneval_offline(scripted):
    args = ["--env.dataset_path", MBPP, "--env.eval_limit", 4, "--env.max_token_length", 2048]
    metrics, samples, printed = scripted.evaluate(CodingEnv, args, humaneval_responder)
    assert metrics["eval/pass@1"] == 0.75 and metrics["eval/percent_correct"] == 0.75
    assert [s["task_id"] for s in samples] == [f"HumanEval/{i}" for i in range(4)]
    assert [s["correct"] for s in samples] == [True, True, True, False]
    assert samples[3]["failure"] and samples[0]["tests_passed"] == 1
    assert "percent_correct=0.7500" in printed


def test_evaluate_on_a_local_file(scripted):
    def respond(prompt: Any, index: int) -> str:
        key = key_of(prompt_text(prompt))
        return reply(RIGHT[key] if key == "For every pair print a + b" else WRONG[key])

    args = ["--env.dataset_path", MBPP, "--env.eval_dataset_path", STDIO, "--env.max_token_length", 2048]
    metrics, samples, _ = scripted.evaluate(CodingEnv, args, respond)
    assert metrics["eval/pass@1"] == 0.5 and len(samples) == 2


def test_system_prompt_replaces_or_drops_the_system_turn(tiny_model_dir, problems):
    problem = problems["sum of the squares of the digits"]
    default = make_env(tiny_model_dir).prompt_messages(problem)
    assert [m["role"] for m in default] == ["system", "user"] and "```python" in default[0]["content"]
    custom = make_env(tiny_model_dir, system_prompt="Solve it in Python.").prompt_messages(problem)
    assert custom == [{"role": "system", "content": "Solve it in Python."}, default[1]]
    assert make_env(tiny_model_dir, system_prompt="").prompt_messages(problem) == [default[1]]


def test_max_test_cases_to_log_is_accepted_with_its_reason(tmp_path):
    config = tmp_path / "coding.yaml"
    config.write_text("env:\n  max_test_cases_to_log: 5\n  system_prompt: Be brief.\n")
    run = parse_command(CodingEnv, ["evaluate", "--config", str(config)]).resolve()
    assert run.env_config.system_prompt == "Be brief."
    assert "never the test cases" in CodingEnv.env_config_cls.ignored_original_keys["max_test_cases_to_log"]
