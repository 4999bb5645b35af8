"""The conversational-style DPO environment: pairs as two-sequence groups (chosen +1, rejected -1, only the
replies trained), the shipped and local pairs, ``process`` and DPO records from its output, and the judged
evaluation with unreadable verdicts counted apart."""

from __future__ import annotations

import json

import pytest

from atroposlib.cli import dpo
from environments.community.conversational_style_dpo.conversational_style_dpo_env import (
    PAIRS,
    ConversationalStyleDPOEnv,
    pairs_from_rows,
)
from tests.environments.community.community_runs import bad_rows_error, env_flags, process_local
from tests.environments.community.judged_helpers import pairwise, respond_with
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import offline_env, setup_failure

SAMPLE = FIXTURES / "community" / "conversational_style_dpo" / "pairs_sample.jsonl"
ROWS = read_jsonl(SAMPLE)


def _longer_wins(a: str, b: str) -> str:
    return "The first is warmer. \\boxed{A}" if len(a) > len(b) else "\\boxed{B}"


def _readme_responder(prompt, index):
    """Nothing is sampled in training; a judge preferring the longer reply answers evaluation prompts."""
    return respond_with(lambda text, i: "unused", pairwise(_longer_wins))(prompt, index)


async def test_a_pair_is_a_group_of_chosen_and_rejected(tiny_model_dir):
    env = offline_env(ConversationalStyleDPOEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    await env.setup()
    pair = env.train[0]
    group, backlog = await env.collect_trajectories(pair)
    assert backlog == [] and group["scores"] == [1.0, -1.0]
    assert [m[-1]["content"] for m in group["messages"]] == [pair.chosen, pair.rejected]
    for tokens, masks, reply in zip(
        group["tokens"], group["masks"], (pair.chosen, pair.rejected), strict=True
    ):
        trained = [t for t, m in zip(tokens, masks, strict=True) if m != -100]
        assert masks[0] == -100 and reply in env.tokenizer.decode(trained)
        assert pair.prompt not in env.tokenizer.decode(trained)


async def test_split_shuffle_and_the_shipped_pairs(tiny_model_dir):
    shipped = pairs_from_rows(read_jsonl(PAIRS), str(PAIRS))
    assert len(shipped) == 16 and all(len(p.chosen) > 2 * len(p.rejected) for p in shipped)
    env = offline_env(ConversationalStyleDPOEnv, tiny_model_dir)
    await env.setup()
    assert (len(env.train), len(env.test)) == (12, 4) and set(env.train + env.test) == set(shipped)
    ordered = offline_env(ConversationalStyleDPOEnv, tiny_model_dir, shuffle_dataset=False)
    await ordered.setup()
    assert ordered.train == [p for p in shipped if p in ordered.train] and ordered.test == env.test
    assert [await env.get_next_item() for _ in range(13)][-1] == env.train[0]  # cycles
    await setup_failure(offline_env(ConversationalStyleDPOEnv, tiny_model_dir, group_size=4), "must be 2")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "p", "chosen": "c"}, "row 1: missing field 'rejected'"),
        ({"prompt": "p", "chosen": " ", "rejected": "r"}, "row 1: field 'chosen' must be a non-empty string"),
        (
            {"prompt": ["p"], "chosen": "c", "rejected": "r"},
            "row 1: field 'prompt' must be a non-empty string",
        ),
        (
            {"prompt": "p", "chosen": "Same  text", "rejected": "Same text"},
            "row 1: field 'rejected' is the same",
        ),
    ],
)
async def test_bad_local_rows(tiny_model_dir, tmp_path, row, message):
    await bad_rows_error(ConversationalStyleDPOEnv, tiny_model_dir, tmp_path, [ROWS[0], row], message)


async def test_a_hub_set_that_cannot_be_loaded_names_it(tiny_model_dir):
    env = offline_env(ConversationalStyleDPOEnv, tiny_model_dir, dataset_name="no-such-user/no-such-pairs")
    await setup_failure(env, "no-such-user/no-such-pairs: cannot load from the hub")


def test_process_writes_pairs_that_dpo_gen_reads(scripted, tmp_path):
    groups = process_local(scripted, ConversationalStyleDPOEnv, SAMPLE, _readme_responder, total_steps=3)
    assert len(groups) == 3 and all(g["scores"] == [1.0, -1.0] for g in groups)
    for group in groups:  # written, not sampled: no inference logprobs
        assert group["inference_logprobs"] is None
        for tokens, masks in zip(group["tokens"], group["masks"], strict=True):
            assert len(tokens) == len(masks) and masks[0] == -100 and any(m != -100 for m in masks)
    source = tmp_path / "groups.jsonl"
    source.write_text("".join(json.dumps(g) + "\n" for g in groups))
    out = tmp_path / "dpo.jsonl"
    assert (
        dpo.main([str(out), "--input", str(source), "--save-messages", "--format", "trl", "--seed", "0"]) == 0
    )
    records = read_jsonl(out)
    by_prompt = {row["prompt"]: row for row in ROWS}
    assert len(records) == 3
    for record in records:
        row = by_prompt[record["prompt"][-1]["content"]]
        assert (record["chosen"][-1]["content"], record["rejected"][-1]["content"]) == (
            row["chosen"],
            row["rejected"],
        )


def test_evaluate_counts_unreadable_verdicts_apart(scripted):
    def verdict(a, b):  # the longer reply wins, except on the puppy: the judge hedges with both letters
        if "puppy" in a or "Cool." in a:
            return "\\boxed{A} or \\boxed{B}"
        return _longer_wins(a, b)

    flags = env_flags(dataset_path=SAMPLE, eval_dataset_path=SAMPLE)
    evaluation = scripted.evaluation(
        ConversationalStyleDPOEnv, flags, respond_with(lambda t, i: "", pairwise(verdict))
    )
    metrics = evaluation.metrics
    assert metrics["eval/preference_accuracy"] == 1.0 and metrics["eval/unscored"] == 1.0
    assert metrics["eval/judge_failures"] == 2.0 and metrics["eval/judge_failure_rate"] == pytest.approx(
        2 / 8
    )
    garbage = scripted.evaluation(
        ConversationalStyleDPOEnv, flags, respond_with(lambda t, i: "", lambda text: "A")
    )
    assert garbage.metrics["eval/unscored"] == 4.0 and garbage.metrics["eval/preference_accuracy"] == 0.0
    shorter = scripted.evaluation(
        ConversationalStyleDPOEnv,
        flags,
        respond_with(lambda t, i: "", pairwise(lambda a, b: _longer_wins(b, a))),
    )
    assert shorter.metrics["eval/preference_accuracy"] == 0.0 and shorter.metrics["eval/unscored"] == 0.0
    assert "conversational_style_dpo evaluation: preference_accuracy=0.0000 on 4 of 4 pairs" in shorter.out
