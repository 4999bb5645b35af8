"""The judge client against a scripted OpenAI-compatible judge: parsing, failures counted apart, both orders."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.evals.judge import Judge, JudgeError, JudgeSettings, failure_metrics, judge_server_config
from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import FIXTURES, REPO_ROOT
from tests.helpers.single_turn_runs import OFFLINE, prompt_text


def verdict(text: str):
    """A toy parser: 'A wins' -> 1.0, 'B wins' -> 0.0, 'tie' -> 0.5."""
    return {"A wins": 1.0, "B wins": 0.0, "tie": 0.5}.get(text.strip())


def pair(first: str, second: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"A={first}\nB={second}"}]


def scripted_judge(answer):
    config = lambda url: APIServerConfig(base_url=url, model_name="judge", api_key="x", server_type="openai")  # noqa: E731
    server = launch_scripted_server(respond=lambda prompt, index: answer(prompt_text(prompt)))
    return server, config


async def test_grade_parses_after_the_think_block_and_fails_apart():
    replies = {"1": "<think>hmm</think>A wins", "2": "no idea", "3": "<think>never closes A wins", "4": "tie"}
    server_cm, config = scripted_judge(lambda text: replies[text[-1]])
    with server_cm as server:
        judge = Judge.from_settings(JudgeSettings(), config(server.base_url))
        results = [await judge.grade([{"role": "user", "content": f"q{i}"}], verdict) for i in "1234"]
        await judge.close()
        body = server.requests[0]["body"]
    assert [r.value for r in results] == [1.0, None, None, 0.5]
    assert [r.failed for r in results] == [False, True, True, False]
    assert results[1].text == "no idea" and results[1].record() == {"verdict": None, "judgement": "no idea"}
    assert body["temperature"] == 0.0 and "max_tokens" not in body  # judge_max_tokens 0: the server's default


async def test_compare_judges_both_orders_and_cancels_position_bias():
    def first_always_wins(text):  # a judge that always prefers the answer shown first
        return "A wins"

    server_cm, config = scripted_judge(first_always_wins)
    with server_cm as server:
        judge = Judge(Judge.from_settings(JudgeSettings(), config(server.base_url)).server, max_tokens=64)
        comparison = await judge.compare(pair, "mine", "theirs", verdict)
        await judge.close()
        shown = sorted(prompt_text(r["body"]["messages"]) for r in server.requests)
        assert all(r["body"]["max_tokens"] == 64 for r in server.requests)
    assert shown == ["A=mine\nB=theirs", "A=theirs\nB=mine"]
    assert (comparison.forward.value, comparison.swapped.value) == (1.0, 1.0)
    assert comparison.score == 0.5 and comparison.failures == 0


async def test_compare_scores_from_the_orders_that_parsed():
    def judge_reply(text):
        first = text.split("\n")[0]
        table = {
            "A=win-both": "A wins", "A=rival-1": "B wins",  # the answer wins in both orders
            "A=half-failed": "garbage", "A=rival-2": "B wins",  # one order unreadable, the other a win
            "A=all-failed": "???", "A=rival-3": "",  # neither order readable
        }  # fmt: skip
        return table[first]

    server_cm, config = scripted_judge(judge_reply)
    with server_cm as server:
        judge = Judge.from_settings(JudgeSettings(), config(server.base_url))
        both = await judge.compare(pair, "win-both", "rival-1", verdict)
        half = await judge.compare(pair, "half-failed", "rival-2", verdict)
        none = await judge.compare(pair, "all-failed", "rival-3", verdict)
        await judge.close()
    assert (both.score, both.failures) == (1.0, 0)
    assert (half.score, half.failures) == (1.0, 1)
    assert (none.score, none.failures) == (None, 2)
    assert none.record()["judge_score"] is None and none.record()["forward"]["verdict"] is None


class BrokenServer:
    async def chat_completion(self, **kwargs):
        raise ConnectionError("judge down")


async def test_a_failed_request_is_a_judge_failure_not_a_crash():
    result = await Judge(BrokenServer()).grade([{"role": "user", "content": "q"}], verdict)
    assert result.failed and result.error == "ConnectionError: judge down"
    comparison = await Judge(BrokenServer()).compare(pair, "a", "b", verdict)
    assert comparison.score is None and comparison.failures == 2


def test_where_the_judge_runs(monkeypatch):
    flags = [APIServerConfig(base_url="http://judge:1/v1", model_name="j")]
    assert judge_server_config(JudgeSettings(), flags) is flags
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(JudgeError, match="environment variable OPENAI_API_KEY is not set"):
        judge_server_config(JudgeSettings())
    monkeypatch.setenv("MY_JUDGE_KEY", "secret")
    settings = JudgeSettings(
        judge_api_key_env="MY_JUDGE_KEY", judge_model_name="m", judge_base_url="https://x/v1"
    )
    config = judge_server_config(settings)
    assert (config.base_url, config.model_name, config.api_key) == ("https://x/v1", "m", "secret")
    local = judge_server_config(JudgeSettings(judge_base_url="http://127.0.0.1:8000/v1"))
    assert local.api_key == "x"  # a local judge needs no key


def test_failure_metrics():
    assert failure_metrics([0, 1, 2], [1, 2, 2]) == {"judge_failures": 3.0, "judge_failure_rate": 0.6}
    assert failure_metrics([], []) == {"judge_failures": 0.0, "judge_failure_rate": 0.0}


def test_a_suite_gives_judge_flags_only_to_judged_benchmarks(tmp_path):
    from atroposlib.evals.suite import command_args
    from environments.eval_environments.mmlu_eval import MMLUEvalEnv
    from environments.eval_environments.simpleqa_eval import SimpleQAEvalEnv

    flags = {"judge.base_url": "http://127.0.0.1:1/v1", "openai.model_name": "m"}
    judged = command_args(SimpleQAEvalEnv, flags, tmp_path / "simpleqa", restart=False)
    plain = command_args(MMLUEvalEnv, flags, tmp_path / "mmlu", restart=False)
    assert "--judge.base_url" in judged and "--judge.base_url" not in plain
    assert "--openai.model_name" in judged and "--openai.model_name" in plain


class FlakyServer:
    """Fails its first ``failures`` requests, then answers "A wins"; records the most requests in flight."""

    def __init__(self, failures: int = 0):
        self.failures, self.calls, self.in_flight, self.most = failures, 0, 0, 0

    async def chat_completion(self, **kwargs):
        self.calls += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        if self.calls <= self.failures:
            raise ConnectionError("flaky")
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="A wins"))])


async def test_retries_concurrency_and_delay():
    flaky = FlakyServer(failures=2)
    judge = Judge(flaky, max_attempts=3, retry_multiplier=0.0)
    assert (await judge.grade([{"role": "user", "content": "q"}], verdict)).value == 1.0 and flaky.calls == 3
    down = FlakyServer(failures=5)
    failed = await Judge(down, max_attempts=2, retry_multiplier=0.0).grade(
        [{"role": "user", "content": "q"}], verdict
    )
    assert failed.failed and failed.error == "ConnectionError: flaky" and down.calls == 2
    busy = FlakyServer()
    limited = Judge(busy, max_concurrent=2, delay_s=0.02)
    start = time.monotonic()
    await asyncio.gather(*(limited.grade([{"role": "user", "content": str(i)}], verdict) for i in range(6)))
    assert busy.most == 2 and time.monotonic() - start >= 3 * 0.02
    settings = JudgeSettings(judge_max_retries=5, judge_max_concurrent_calls=3, judge_rate_limit_delay=0.5)
    built = Judge.from_settings(settings, [APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="j")])
    assert (built.max_attempts, built.delay_s, built._slots._value) == (5, 0.5, 3)
    await built.close()


def test_a_suite_with_a_judged_benchmark_sends_the_judge_flags_to_it(tmp_path):
    """``atropos-eval simpleqa mmlu --judge.base_url ...``: SimpleQA asks the judge, MMLU runs as usual."""
    policy = launch_scripted_server(respond=lambda prompt, index: "<think>ok</think><answer>A</answer>")
    judge = launch_scripted_server(respond=lambda prompt, index: "A")
    with policy as model, judge as grader:
        args = [sys.executable, "-m", "atroposlib.cli.eval_suite", "simpleqa", "mmlu", "--base-url", model.base_url,
                "--model", "m", "--evals-dir", str(REPO_ROOT / "environments" / "eval_environments"),
                "--data-dir", str(FIXTURES / "evals"), "--output-dir", str(tmp_path / "out"),
                "--judge.base_url", grader.base_url, "--judge.model_name", "j", "--env.retry_delay", "0"]  # fmt: skip
        run = subprocess.run(args, cwd=tmp_path, env={**os.environ, **OFFLINE}, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
        graded = len(grader.requests)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {
        row["benchmark"]: row for row in json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    }
    assert (
        rows["simpleqa"]["metrics"]["f_score"] == 1.0 and rows["simpleqa"]["metrics"]["judge_failures"] == 0
    )
    assert rows["mmlu"]["status"] == "ok" and graded == 6  # one judgement per SimpleQA item
