"""Humor generation: the judged six-part rubric, unreadable verdicts counted apart, replies scored without the
judge, local prompts, ``process`` and ``evaluate``."""

from __future__ import annotations

import asyncio

import pytest

from atroposlib.envs.base import APIServerConfig
from environments.community.humor_generation.humor_env import (
    DATASET,
    HumorEnv,
    HumorEnvConfig,
    HumorItem,
    parse_rubric,
    unjudgeable,
)
from tests.environments.community import judged_helpers
from tests.environments.community.community_runs import env_flags, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "humor_generation" / "humor_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
ITEM = HumorItem("Mitch Hedberg", "one-liner", ROWS[0]["question"])
FUNNY = "<think>stairs angle</think>An escalator can never break: it can only become stairs. Sorry for the convenience."
BLAND = "Escalators move people between floors."


def rubric(*scores) -> str:
    return "\n".join(f"{n}. Score: {s}" for n, s in enumerate(scores, start=1))


def critic(jokes: str) -> str:
    """A judge: top marks for the stairs joke, low marks for a bland one, garbage for anything else."""
    if "become stairs" in jokes:
        return "<think>Very Hedberg.</think>" + rubric(2, 2, 3, 3, 3, 3)
    if "floors" in jokes:
        return rubric(1, 0, 1, 0, 0, 2)
    return "I laughed, I cried. Ten out of ten."


def _jokes(text: str) -> str:
    return text.split("[Jokes]\n", 1)[1].split("\n[End of jokes]", 1)[0]


def respond_with(policy, judge=critic):
    """Judge prompts (they hold ``[Jokes]``) get ``judge(jokes)``; policy prompts get ``policy(text, i)``."""
    return judged_helpers.respond_with(policy, lambda text: judge(_jokes(text)), "[Jokes]\n")


@pytest.mark.parametrize(
    ("verdict", "value"),
    [
        (rubric(2, 2, 3, 3, 3, 3), 1.0),
        (rubric(1, 0, 1, 0, 0, 2), 0.25),
        ("Relevance - score: 2\nStyle score:1\n" + rubric(0, 0, 0, 0)[3:], 3 / 16),
        (rubric(2, 2, 3, 3, 3), None),  # five scores
        (rubric(2, 2, 3, 3, 3, 3, 3), None),  # seven
        (rubric(3, 2, 3, 3, 3, 3), None),  # format relevance is out of 0-2
        (rubric(2, 2, 3, 3, 3, -1), None),
        (rubric(2, 2, 2.5, 3, 3, 3), None),  # whole numbers only
        ("Score: X (0-2)\n" * 6, None),
        ("", None),
    ],
)
def test_rubric_verdicts(verdict, value):
    assert parse_rubric(verdict) == value


@pytest.mark.parametrize(
    ("reply", "skipped"),
    [
        (FUNNY, False),
        ("", True),
        ("<think>jokes about stairs", True),  # reasoning never closes
        ("<think>x</think>   ", True),
        (f"Sure! {ITEM.question.upper()} Here you go.", True),  # the prompt echoed
        (f"{BLAND}\nScore: 3\nScore: 3", True),  # answering for the judge
        (f"<think>Score: 2 would be nice</think>{BLAND}", False),  # reasoning never counts
    ],
)
def test_replies_scored_without_the_judge(reply, skipped):
    assert unjudgeable(reply, ITEM) is skipped


async def _scores(tiny_model_dir, replies, judge=critic):
    return await judged_helpers.judged_scores(
        HumorEnv, tiny_model_dir, replies, ITEM, lambda t: judge(_jokes(t))
    )


async def test_the_judge_grades_the_jokes_after_the_reasoning(tiny_model_dir):
    scores, env, requests = await _scores(tiny_model_dir, [FUNNY, BLAND, ""])
    assert scores == [1.0, 0.25, 0.0] and len(requests) == 2
    assert all("stairs angle" not in r for r in requests) and any("Mitch Hedberg" in r for r in requests)
    assert "Relevance to the format (one-liner): Score: X (0-2)" in requests[0]
    assert env.tally.drain() == {"train/judge_failures": 0.0, "train/judge_failure_rate": 0.0}


async def test_unreadable_verdicts_carry_no_advantage(tiny_model_dir):
    odd = "Escalators: the stairs of tomorrow, today."
    scores, env, _ = await _scores(tiny_model_dir, [FUNNY, odd, BLAND, ITEM.question])
    assert scores == [1.0, 5 / 12, 0.25, 0.0]  # the unreadable one gets the mean of the others
    assert env.tally.drain() == {"train/judge_failures": 1.0, "train/judge_failure_rate": 1 / 3}
    scores, _, _ = await _scores(tiny_model_dir, [odd, odd + "!"])
    assert scores == [0.0, 0.0]  # nothing readable: no signal, never a win


async def test_prompts_shipped_and_local(tiny_model_dir, tmp_path):
    env = offline_env(HumorEnv, tiny_model_dir)
    await env.setup()
    assert len(env.train) == 18 and env.test == env.train
    assert {i.format for i in env.train} == {"haiku", "one-liner", "q/a over sms"}
    assert env.prompt_messages(env.train[0]) == [{"role": "user", "content": env.train[0].question}]
    original = HumorEnvConfig(data_path=str(SAMPLE))  # the original's name of dataset_path
    assert original.dataset_path == str(SAMPLE) and DATASET.is_file()
    path = write_jsonl(tmp_path / "rows.jsonl", [ROWS[0], {"comedian": "X", "format": "haiku"}])
    error = await setup_failure(
        offline_env(HumorEnv, tiny_model_dir, dataset_path=path), "row 1: missing field 'question'"
    )
    assert path in str(error)
    path = write_jsonl(tmp_path / "blank.jsonl", [{"comedian": " ", "format": "haiku", "question": "q"}])
    await setup_failure(offline_env(HumorEnv, tiny_model_dir, dataset_path=path), "row 0: field 'comedian'")


def _policy(text: str, index: int) -> str:
    return [FUNNY, BLAND][index % 2]


def test_process_end_to_end(scripted):
    groups = process_local(scripted, HumorEnv, SAMPLE, respond_with(_policy), total_steps=2, max_tokens=64)
    check_groups(groups, 2, [0.25, 1.0])
    assert all(
        g["messages"][0][0] == {"role": "user", "content": g["messages"][0][0]["content"]} for g in groups
    )


def test_evaluate_leaves_unreadable_verdicts_out(scripted):
    def judge(jokes):
        return critic(jokes) if "floors" not in jokes else "no comment"

    def policy(text, index):
        return FUNNY if "escalators" in text else BLAND

    evaluation = scripted.evaluation(
        HumorEnv, env_flags(dataset_path=SAMPLE, max_tokens=64), respond_with(policy, judge)
    )
    metrics = evaluation.metrics
    assert metrics["eval/unscored"] == 2.0 and metrics["eval/mean_score"] == 1.0
    assert metrics["eval/percent_correct"] == 1.0 and metrics["eval/judge_failure_rate"] == pytest.approx(
        2 / 3
    )
    assert sorted(s["score"] is None for s in evaluation.samples) == [False, True, True]


def _readme_responder(prompt, index):
    return respond_with(_policy)(prompt, index)


def test_the_policy_servers_judge_unless_told_otherwise(tiny_model_dir):
    config = HumorEnvConfig(tokenizer_name=str(tiny_model_dir), use_wandb=False, judge_max_concurrent_calls=1)
    env = HumorEnv(
        config, APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m", server_type="vllm")
    )
    assert env.judge.server is env.server and isinstance(env.judge._slots, asyncio.Semaphore)
    config = HumorEnvConfig(tokenizer_name=str(tiny_model_dir), judge_base_url="http://127.0.0.1:7/v1")
    other = HumorEnv(
        config, APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m", server_type="vllm")
    )
    assert other.judge.server is not other.server
