"""The quantum hybrid environment: the PennyLane text analyzer against an independent state-vector
computation, the continuation score both ways, WikiText-schema local data, ``process`` and ``evaluate``."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from environments.community.quantum_hybrid.atopos_quant import QuantumHybridEnv, continuation_text
from environments.community.quantum_hybrid.continuation import (
    Continuation,
    jaccard,
    length_score,
    split_passage,
)
from environments.community.quantum_hybrid.quantum_text import quantum_coherence, text_features
from tests.environments.community.community_runs import bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import offline_env, prompt_text

SAMPLE = FIXTURES / "community" / "quantum_hybrid" / "wikitext_sample.jsonl"
PASSAGES = [r["text"].strip() for r in read_jsonl(SAMPLE) if len(r["text"].split()) >= 11]
ITEM = Continuation(
    "The keepers lived in a small stone cottage beside the tower",
    "and rowed to the village for supplies once a week . During the great storm of 1903 the cottage was",
)
UNRELATED = "Quarterly revenue rose sharply as the company expanded into new markets abroad last year."


def _expectations(angles: list[float], wires: int) -> list[float]:
    """<Z> per wire of the documented circuit, by a direct numpy state-vector simulation."""
    state = np.zeros(2**wires)
    state[0] = 1.0
    state = state.reshape([2] * wires)
    for wire, angle in enumerate(angles[:wires]):
        ry = np.array(
            [[math.cos(angle / 2), -math.sin(angle / 2)], [math.sin(angle / 2), math.cos(angle / 2)]]
        )
        state = np.moveaxis(np.tensordot(ry, state, axes=([1], [wire])), 0, wire)
    pairs = (
        [(w, w + 1) for w in range(wires - 1)]
        + [(wires - 1, 0)]
        + [(w, w + 2) for w in range(0, wires - 2, 2)]
    )
    for control, target in pairs:
        flipped = state.copy()
        index = [slice(None)] * wires
        index[control] = 1
        sub = np.moveaxis(state[tuple(index)], target - (target > control), 0)[::-1]
        flipped[tuple(index)] = np.moveaxis(sub, 0, target - (target > control))
        state = flipped
    probs = np.abs(state) ** 2
    return [
        float(np.sum(np.take(probs, 0, axis=w)) - np.sum(np.take(probs, 1, axis=w))) for w in range(wires)
    ]


@pytest.mark.parametrize("wires", [3, 6, 8])
@pytest.mark.parametrize("text", [ITEM.target, "SHOUTING!!! Really?", UNRELATED])
def test_the_circuit_is_the_documented_one(text, wires):
    readout = _expectations(text_features(text), wires)
    variance = float(np.var(readout))
    assert quantum_coherence(text, wires) == pytest.approx(variance / (variance + 0.1), abs=1e-9)


def test_features_and_the_empty_text():
    assert quantum_coherence("") == 0.0  # every wire stays in |0>: no variance
    features = text_features("Ab, cd.")
    assert features[1] == pytest.approx(math.pi * 2 / 100) and features[4] == pytest.approx(math.pi * 2 / 7)


def test_overlap_and_length():
    assert jaccard("The Cottage was", "the cottage WAS") == 1.0  # case does not matter
    assert jaccard("", "x") == 0.0 and length_score("abcd", "abcd") == 1.0
    assert length_score("a" * 50, "abcd") == 0.0 and length_score("ab", "abcd") == 0.5


async def test_scores_both_ways(tiny_model_dir):
    env = offline_env(QuantumHybridEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    right = env.score_reply(f"<think>A storm story.</think> {ITEM.target}", ITEM)
    wrong = env.score_reply(UNRELATED, ITEM)
    assert right > 0.5 > wrong > -1.0
    assert env.score_reply(ITEM.target.upper(), ITEM) == pytest.approx(right, abs=0.1)  # same words, any case
    assert (
        env.score_reply(f"<think>{ITEM.target}</think>{UNRELATED}", ITEM) == wrong
    )  # reasoning never counts
    for bad in (
        f"<think>{ITEM.target}</think>",  # only inside the reasoning
        f"<think>{ITEM.target}",  # unclosed
        "",
        f"{ITEM.prompt} {ITEM.target}",  # echoes the prompt
    ):
        assert env.score_reply(bad, ITEM) == -1.0, bad
    assert continuation_text("<think>x</think>  more text ") == "more text"


def test_training_and_evaluation_splits():
    text = PASSAGES[0]
    rng = random.Random(3)
    for _ in range(20):
        item = split_passage(text, rng)
        cut = len(item.prompt.split())
        assert 5 <= cut <= 20 and item.target.split() == text.split()[cut : cut + 20]
    half = split_passage(text)
    assert f"{half.prompt} {half.target}" == text and len(half.prompt.split()) == len(text.split()) // 2


async def test_local_data(tiny_model_dir):
    env = offline_env(QuantumHybridEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    await env.setup()
    assert len(env.train) == 5 and len(env.test) == 1  # blank lines, headings and short rows are left out
    both = offline_env(
        QuantumHybridEnv, tiny_model_dir, dataset_path=str(SAMPLE), eval_dataset_path=str(SAMPLE)
    )
    await both.setup()
    assert len(both.train) == len(both.test) == 6


@pytest.mark.parametrize(
    ("row", "message"),
    [({"title": "x"}, "row 1: missing field 'text'"), ({"text": 5}, "row 1: not text in field 'text'")],
)
async def test_bad_local_rows(tiny_model_dir, tmp_path, row, message):
    await bad_rows_error(QuantumHybridEnv, tiny_model_dir, tmp_path, [read_jsonl(SAMPLE)[3], row], message)


async def test_no_usable_passage(tiny_model_dir, tmp_path):
    await bad_rows_error(QuantumHybridEnv, tiny_model_dir, tmp_path, [{"text": " = Title = "}], "no passage")


def _responder(prompt, index):
    """The passage's real next words for even choices, unrelated text for odd ones."""
    start = prompt_text(prompt).split("Continue this text: ", 1)[-1].split("<|im_end|>")[0].strip()
    passage = next(p for p in PASSAGES if p.startswith(start))
    return " ".join(passage[len(start) :].split()[:20]) if index % 2 == 0 else UNRELATED


def test_process_with_a_local_file(scripted):
    groups = process_local(scripted, QuantumHybridEnv, SAMPLE, _responder, group_size=2, total_steps=2)
    assert len(groups) == 2
    for group in groups:
        assert group["scores"][0] > 0.5 > group["scores"][1]


def test_evaluate(scripted):
    evaluation = evaluate_local(scripted, QuantumHybridEnv, SAMPLE, _responder)
    metrics = evaluation.metrics
    assert metrics["eval/percent_correct"] == 1.0 and 0.6 < metrics["eval/combined_score"] <= 1.0
    assert 0 < metrics["eval/quantum_coherence"] < 1 and len(evaluation.samples) == 5  # eval_limit 5
