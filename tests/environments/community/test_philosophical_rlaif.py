"""Philosophical RLAIF: pairwise judging in both orders, unreadable verdicts counted apart, cut and malformed
replies, WildChat rows, the original's option names, ``process`` and ``evaluate`` against the reference."""

from __future__ import annotations

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.community.philosophical_rlaif_env import (
    CutReplies,
    PhilosophicalRLAIFConfig,
    PhilosophicalRLAIFEnv,
    PhilosophyItem,
)
from environments.rlaif_server import row_to_item
from tests.environments.community import judged_helpers
from tests.environments.community.community_runs import env_flags, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "philosophical_rlaif" / "wildchat_philosophy.jsonl"
ROWS = read_jsonl(SAMPLE)
PROMISE = PhilosophyItem(row_to_item(ROWS[0], 0, "f"))
DEEP = (
    "<think>Kant vs Mill</think>It depends on which paradox you accept: duty binds, yet consequences matter."
)
SHALLOW = "Yes, sometimes."


# prefers the reply that names a paradox; an unreadable verdict when neither or both do
depth_judge = judged_helpers.marker_verdict(
    "paradox", "Both have merit; I cannot decide.", "<think>Depth.</think>"
)


def respond_with(policy, verdict=depth_judge):
    return judged_helpers.pairwise_responder(policy, verdict)


async def _scores(tiny_model_dir, replies, verdict=depth_judge):
    return await judged_helpers.pairwise_scores(
        PhilosophicalRLAIFEnv, tiny_model_dir, replies, PROMISE, verdict
    )


async def test_the_deeper_reply_wins_in_both_orders(tiny_model_dir):
    scores, env, requests = await _scores(tiny_model_dir, [SHALLOW, DEEP])
    assert scores == [-1.0, 1.0] and len(requests) == 2
    assert all("Kant vs Mill" not in r and "Is it ever right to break a promise?" in r for r in requests)
    assert env.tally.drain() == {"train/judge_failures": 0.0, "train/judge_failure_rate": 0.0}


async def test_a_position_biased_judge_gives_a_split(tiny_model_dir):
    scores, _, _ = await _scores(tiny_model_dir, [SHALLOW, DEEP], lambda a, b: "\\boxed{A}")
    assert scores == [0.0, 0.0]


async def test_unreadable_verdicts_are_never_wins(tiny_model_dir):
    scores, env, _ = await _scores(tiny_model_dir, [SHALLOW, SHALLOW + "!"], lambda a, b: "A is better.")
    assert scores == [0.0, 0.0]
    assert env.tally.drain() == {"train/judge_failures": 2.0, "train/judge_failure_rate": 1.0}
    scores, _, requests = await _scores(tiny_model_dir, [SHALLOW, DEEP, DEEP + " Indeed."])
    assert scores == [-1.0, 1.0, 1.0] and len(requests) == 6  # the two deep ones' verdicts count for neither


@pytest.mark.parametrize(
    ("replies", "cut", "expected", "asked"),
    [
        ([DEEP, "<think>a paradox, surely", SHALLOW], [False] * 3, [1.0, -1.0, -1.0], 2),  # never closes
        ([DEEP, "", SHALLOW], [False] * 3, [1.0, -1.0, -1.0], 2),
        ([DEEP, SHALLOW], [True, False], [-1.0, 0.0], 0),  # cut at the budget: not judged
    ],
)
async def test_malformed_and_cut_replies_score_minus_one(tiny_model_dir, replies, cut, expected, asked):
    scores, _, requests = await _scores(tiny_model_dir, CutReplies(replies, cut))
    assert scores == expected and len(requests) == asked


async def test_conversations_options_and_long_prompts(tiny_model_dir, tmp_path, hub_offline):
    env = offline_env(
        PhilosophicalRLAIFEnv, tiny_model_dir, dataset_path=str(SAMPLE), preference_prompt_chance=1.0
    )
    await env.setup()
    assert len(env.train) == 4 and len(env.test) == 3  # the multi-turn one has no reference reply
    item = await env.get_next_item()
    assert item.primed and env.prompt_messages(item)[0]["role"] == "system"
    original = PhilosophicalRLAIFConfig(generator_max_tokens=300, generator_model_name="gpt-3.5-turbo")
    assert original.max_tokens == 300 and not hasattr(original, "generator_model_name")
    tight = offline_env(
        PhilosophicalRLAIFEnv, tiny_model_dir, dataset_path=str(SAMPLE), max_token_length=40, max_tokens=30
    )
    await tight.setup()
    with pytest.raises(DatasetError, match="no conversation fits"):
        await tight.get_next_item()
    path = write_jsonl(tmp_path / "rows.jsonl", [ROWS[0], {"conversation": [{"role": "user"}]}])
    await setup_failure(
        offline_env(PhilosophicalRLAIFEnv, tiny_model_dir, dataset_path=path),
        r"row 1: conversation\[0\] lacks 'content'",
    )
    error = await setup_failure(
        offline_env(PhilosophicalRLAIFEnv, tiny_model_dir), "allenai/WildChat: cannot load"
    )
    assert "--env.dataset_path" in str(error)


def _policy(text: str, index: int) -> str:
    return [DEEP, SHALLOW][index % 2]


def _readme_responder(prompt, index):
    return respond_with(_policy)(prompt, index)


def test_process_end_to_end(scripted):
    groups = process_local(
        scripted, PhilosophicalRLAIFEnv, SAMPLE, respond_with(_policy), total_steps=2, max_tokens=64
    )
    check_groups(groups, 2, [-1.0, 1.0])


def test_evaluate_against_the_reference_reply(scripted):
    def verdict(a, b):  # the policy's reply wins in both orders, except on free will: unreadable
        if "Compatibilists" in a or "Compatibilists" in b:
            return "pass"
        return "\\boxed{A}" if "paradox" in a else "\\boxed{B}"

    evaluation = scripted.evaluation(
        PhilosophicalRLAIFEnv,
        env_flags(dataset_path=SAMPLE, max_tokens=64),
        respond_with(lambda t, i: DEEP, verdict),
    )
    metrics = evaluation.metrics
    assert metrics["eval/win_rate"] == 1.0 and metrics["eval/unscored"] == 1.0
    assert metrics["eval/judge_failures"] == 2.0 and metrics["eval/percent_correct"] == 1.0
