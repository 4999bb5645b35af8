"""A verifiers (v1) taskset written for the tests (``tests/fixtures/vf_tasksets``) through ``serve``,
``process`` and ``evaluate``: its tasks, its weighted rewards as the score, and the features not carried."""

from __future__ import annotations

import re
from typing import Any

import pytest

from environments.verifiers_server import VerifiersEnv
from tests.helpers.cli_runs import FIXTURES, run_env
from tests.helpers.single_turn_runs import check_group, offline_env, prompt_text

TASKSETS = FIXTURES / "vf_tasksets"


@pytest.fixture(autouse=True)
def tasksets_installed(monkeypatch):
    """The test tasksets importable here and in the commands' subprocesses, as an installed package is."""
    monkeypatch.syspath_prepend(str(TASKSETS))
    monkeypatch.setenv("PYTHONPATH", str(TASKSETS))


def _sum_of(prompt: Any) -> int:
    a, b = re.search(r"What is (\d+) \+ (\d+)\?", prompt_text(prompt)).groups()
    return int(a) + int(b)


def right_on_even_choices(prompt: Any, index: int) -> str:
    total = _sum_of(prompt)
    return f"<think>adding</think>The sum is \\boxed{{{total if index % 2 == 0 else total + 1}}}."


def right_on_even_tasks(prompt: Any, index: int) -> str:
    total = _sum_of(prompt)
    return f"\\boxed{{{total}}}" if (total - 3) % 4 == 0 else f"\\boxed{{{total + 1}}}"


async def test_the_tasksets_rewards_are_the_score(tiny_model_dir):
    env = offline_env(VerifiersEnv, tiny_model_dir, vf_env_name="vf_test_arith", vf_env_args={"count": 10})
    await env.setup()
    assert len(env.train) == 9 and len(env.test) == 1  # a tenth held out
    task = env.train[2]  # What is 2 + 5?
    assert env.prompt_messages(task) == [
        {"role": "system", "content": "Box your answer."},
        {"role": "user", "content": "What is 2 + 5?"},
    ]
    replies = ["\\boxed{7}", "<think>2 and 5</think>so \\boxed{ 7 }", "\\boxed{8}", "7", "", "\\boxed{}"]
    assert await env.score_replies_async(replies, task) == [1.5, 1.5, 0.5, 0.0, 0.0, 0.5]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env.vf_env_name", "vf_test_tools"], "has toolsets: tools run as MCP servers"),
        (["--env.vf_env_name", "vf_not_installed"], "taskset 'vf_not_installed' not found"),
        (
            ["--env.vf_env_name", "vf_test_arith", "--env.vf_env_args", '{"count": "many"}'],
            "bad --env.vf_env_args",
        ),
        ([], "--env.vf_env_name is not set"),
    ],
)
def test_what_is_not_carried_stops_the_command_in_one_line(args, message, tiny_model_dir, tmp_path):
    result = run_env(
        FIXTURES.parents[1] / "environments" / "verifiers_server.py",
        ["process", *args, "--env.tokenizer_name", tiny_model_dir, "--env.use_wandb", "false"],
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("server_type", ["vllm", None], ids=["token-exact", "chat-endpoint"])
def test_process_writes_groups_scored_by_the_taskset(scripted, server_type):
    args = ["--env.vf_env_name", "vf_test_arith", "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens", "64"]  # fmt: skip
    groups = scripted.process(VerifiersEnv, args, right_on_even_choices, server_type=server_type)
    assert len(groups) == 2
    for group in groups:
        assert sorted(group["scores"]) == [0.5, 0.5, 1.5, 1.5]
        if server_type == "vllm":
            check_group(group, 4)  # the server's own tokens and logprobs, the reply trained
        assert all(m[-1]["role"] == "assistant" and "\\boxed" in m[-1]["content"] for m in group["messages"])


def test_evaluate_reports_exact_metrics_on_another_configuration(scripted):
    evaluation = scripted.evaluation(
        VerifiersEnv,
        ["--env.vf_env_name", "vf_test_arith", "--env.eval_vf_env_args", '{"count": 4, "offset": 100}',
         "--env.max_tokens", "64"],
        right_on_even_tasks,
    )  # fmt: skip
    assert [s["task_idx"] for s in evaluation.samples] == [0, 1, 2, 3]
    assert [s["score"] for s in evaluation.samples] == [1.5, 0.5, 1.5, 0.5]  # 203, 205, 207, 209
    assert evaluation.metrics["eval/mean_score"] == 1.0 and evaluation.metrics["eval/percent_correct"] == 0.5


def test_serve_sends_token_exact_groups(scripted, api):
    served = scripted.serve(
        VerifiersEnv, ["--env.vf_env_name", "vf_test_arith", "--env.group_size", "2", "--env.max_tokens", "64"],
        right_on_even_choices, api,
    )  # fmt: skip
    assert sorted(served.group["scores"]) == [0.5, 1.5]
    check_group(served.group, 2)
    assert all(r["path"] == "/generate" for r in served.requests)
