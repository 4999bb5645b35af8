"""BLEUBERI: the BLEU reward against the reference (answers, hedges, reasoning), the original's options, tulu
rows, ``process`` and ``evaluate``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from environments.community.bleuberi.bleuberi_env import (
    BLEUBERIEnv,
    BLEUBERIEnvConfig,
    bleu_reward,
    item_from_row,
    reply_answer,
)
from tests.environments.community.community_runs import evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "bleuberi" / "tulu_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
JUPITER = item_from_row(ROWS[0], 0, "f")
REFERENCE = JUPITER.references[0]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (f"<answer>{REFERENCE}</answer>", 1.0),
        (f"<think>Jupiter, surely.</think><answer>{REFERENCE}</answer>", 1.0),
        (f"<think>big</think>\n{REFERENCE}\n", 1.0),  # no answer tags: the text after the reasoning
        (f"<answer>{REFERENCE}</answer> again <answer>{REFERENCE}</answer>", 1.0),  # the same answer twice
        ("<answer>Jupiter is the largest planet.</answer>", pytest.approx(0.4083, abs=1e-3)),  # partly right
        (f"<answer>{REFERENCE}</answer><answer>Saturn is the largest planet.</answer>", 0.0),  # a hedge
        (f"<think>{REFERENCE}", 0.0),  # reasoning never closes
        ("<answer>   </answer>", 0.0),
        ("", 0.0),
    ],
)
def test_bleu_reward(reply, expected):
    assert bleu_reward(reply, JUPITER.references) == expected


def test_reasoning_padding_and_echoes():
    hidden = f"<think><answer>{REFERENCE}</answer></think>I am not sure."
    assert bleu_reward(hidden, JUPITER.references) == bleu_reward("I am not sure.", JUPITER.references) < 0.05
    assert bleu_reward(f"<answer>{REFERENCE} {REFERENCE} {REFERENCE}</answer>", JUPITER.references) < 0.5
    echo = f"<answer>{JUPITER.prompt}</answer>"
    assert bleu_reward(echo, JUPITER.references) > 0.5  # BLEU alone rewards the echo ...
    assert bleu_reward(echo, JUPITER.references, JUPITER.prompt) == 0.0  # ... the environment does not
    assert (
        bleu_reward(f"<answer>Sure. {JUPITER.prompt.upper()}</answer>", JUPITER.references, JUPITER.prompt)
        == 0.0
    )
    assert reply_answer("<think>x</think><answer> a\n b </answer>") == "a b"


def test_rows_and_options():
    spider = item_from_row(ROWS[1], 1, "f")
    assert spider.prompt == "How many legs does a spider have?" and spider.references == (
        "A spider has eight legs.",
    )
    assert spider.source == "ai2-adapt-dev/oasst" and spider.id == "tulu-1"
    config = BLEUBERIEnvConfig(selection_mode="hard", num_examples=5, streaming=False, ref_models=["gold"])
    assert not hasattr(config, "selection_mode")
    with pytest.raises(ValidationError, match="only \\['bleu'\\]"):
        BLEUBERIEnvConfig(reward_funcs=["bleu", "rouge"])
    with pytest.raises(ValidationError, match="only \\['gold'\\]"):
        BLEUBERIEnvConfig(ref_models=["gpt-4o"])


async def test_split_limits_and_bad_rows(tiny_model_dir, tmp_path, hub_offline):
    env = offline_env(BLEUBERIEnv, tiny_model_dir, dataset_path=str(SAMPLE), max_train_examples=1)
    await env.setup()
    assert len(env.train) == 1 and len(env.test) == 1 and env.test[0] not in env.train
    assert env.prompt_messages(env.train[0])[0]["role"] == "system"
    plain = offline_env(BLEUBERIEnv, tiny_model_dir, dataset_path=str(SAMPLE), reasoning=False, shuffle=False)
    await plain.setup()
    assert plain.prompt_messages(plain.train[0]) == [{"role": "user", "content": JUPITER.prompt}]
    path = write_jsonl(tmp_path / "rows.jsonl", [ROWS[0], {"messages": [{"role": "user", "content": "hi"}]}])
    error = await setup_failure(
        offline_env(BLEUBERIEnv, tiny_model_dir, dataset_path=path),
        "row 1: field 'messages' has no assistant turn",
    )
    assert path in str(error)
    error = await setup_failure(
        offline_env(BLEUBERIEnv, tiny_model_dir), "allenai/tulu-3-sft-mixture: cannot load"
    )
    assert "--env.dataset_path" in str(error)


def _reference_for(text: str) -> str:
    row = next(r for r in ROWS if item_from_row(r, 0, "f").prompt in text)
    return item_from_row(row, 0, "f").references[0]


def _responder(prompt, index):
    """The reference in answer tags, then a hedge."""
    text = prompt_text(prompt)
    return (
        f"<think>ok</think><answer>{_reference_for(text)}</answer>"
        if index % 2 == 0
        else "<answer>Saturn</answer><answer>Mars</answer>"
    )


def test_process_with_a_local_file(scripted):
    groups = process_local(
        scripted, BLEUBERIEnv, SAMPLE, _responder, eval_dataset_path=SAMPLE, total_steps=2, max_tokens=64
    )
    check_groups(groups, 2, [0.0, 1.0])


def test_evaluate_reports_bleu_by_source(scripted):
    evaluation = evaluate_local(scripted, BLEUBERIEnv, SAMPLE, _responder, max_tokens=64)
    metrics = evaluation.metrics
    assert metrics["eval/accuracy"] == 1.0 and metrics["eval/avg_bleu"] == 1.0
    assert metrics["eval/avg_bleu/ai2-adapt-dev/flan"] == 1.0 and len(evaluation.samples) == 3
