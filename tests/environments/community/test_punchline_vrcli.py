"""The punchline VR-CLI environment: reply format, the VR-CLI reward on a reference model built here, the
Reddit jokes filter on local posts, ``process`` and ``evaluate``.

The reference model is a one-layer Qwen2 model whose weights are set, not trained: queries and keys are zero,
so every position attends evenly to all before it, values and outputs copy the (random, nearly orthogonal)
token embeddings, and the tied output layer then favours the tokens already in the context. A reasoning
that contains the punchline's words therefore lowers its perplexity, as a real reference model's would.
``python tests/environments/community/test_punchline_vrcli.py`` rewrites the committed copy in
``tests/fixtures/community/punchline_vrcli/reference_model`` (used by ``process`` and the README command).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from environments.community.punchline_vrcli.jokes import is_joke, load_jokes
from environments.community.punchline_vrcli.punchline_env import (
    PunchlineEnv,
    reply_parts,
    scorable_reasoning,
)
from environments.community.punchline_vrcli.vrcli import ReferenceScorer, vrcli_reward
from tests.environments.community.community_runs import bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import offline_env, prompt_text

HERE = FIXTURES / "community" / "punchline_vrcli"
SAMPLE = HERE / "jokes_sample.jsonl"
REFERENCE = HERE / "reference_model"
COW = {"question": "What do you call a cow with no legs?", "answer": "Ground beef."}
HELPFUL = "<think>A cow lying on the ground is just beef: ground beef.</think>\nGround beef."
UNRELATED = "<think>Cows are animals that live on farms and give milk.</think>\nA milkshake."


def build_reference_model(out_dir: Path, hidden: int = 64, logit_scale: float = 0.3) -> Path:
    """Write the context-copying reference model (see the module docstring) and the tiny tokenizer to
    ``out_dir``; deterministic."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from atroposlib.testing.tiny_model import TinyModelSpec, build_tokenizer

    tokenizer = build_tokenizer(TinyModelSpec(), out_dir)
    config = Qwen2Config(
        vocab_size=(len(tokenizer) + 63) // 64 * 64, hidden_size=hidden, intermediate_size=4,
        num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=8192,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "embed" in name:
                weight.normal_(0.0, 1.0)
            elif "norm" in name:
                weight.fill_(1.0)
            else:
                weight.zero_()  # queries, keys and the MLP: even attention, no feed-forward
        attention = model.model.layers[0].self_attn
        attention.v_proj.weight.copy_(torch.eye(hidden))
        attention.o_proj.weight.copy_(8.0 * torch.eye(hidden))  # the context outweighs the current token
        model.model.norm.weight.fill_(logit_scale)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


@pytest.fixture(scope="module")
def built_reference(tmp_path_factory) -> Path:
    return build_reference_model(tmp_path_factory.mktemp("reference"))


@pytest.fixture(scope="module")
def scorer(built_reference) -> ReferenceScorer:
    return ReferenceScorer(str(built_reference))


@pytest.mark.parametrize(
    ("reply", "parts"),
    [
        (HELPFUL, ("A cow lying on the ground is just beef: ground beef.", "Ground beef.")),
        ("cows lie down</think>  Ground beef.  \n", ("cows lie down", "Ground beef.")),  # template-opened
        ("<think>cows</think>", None),  # the punchline only inside the reasoning, or none
        ("<think>beef: Ground beef.</think>\n\n", None),
        ("<think>cows</think>Ground beef.\nOr maybe: Udder nonsense.", None),  # a hedge: two punchlines
        ("<think>cows</think>1. Ground beef.\n2. Steak.", None),
        ("Ground beef.", None),  # no reasoning
        ("<think></think>Ground beef.", None),  # empty reasoning
        ("<think>cows Ground beef.", None),  # unclosed
        ("Well. <think>cows</think>Ground beef.", None),  # text before the reasoning
        ("<think>a</think><think>b</think>Ground beef.", None),
    ],
)
def test_reply_format(reply, parts):
    assert reply_parts(reply) == parts


def test_echoes_are_not_scored():
    question = COW["question"]
    assert scorable_reasoning(HELPFUL, question) is not None
    assert scorable_reasoning(f"<think>{question}</think>Ground beef.", question) is None  # echoes the setup
    assert (
        scorable_reasoning("<think>no legs, a cow</think>What do you call a cow with no legs?", question)
        is None
    )


def test_reward_shapes():
    assert vrcli_reward(0.25) == 0.25 and vrcli_reward(-0.4) == 0.0
    assert [vrcli_reward(g, tiers=True) for g in (-0.1, 0.0004, 0.0005, 0.0099, 0.01, 0.019, 0.02, 0.6)] == [
        0.0, 0.0, 0.5, 0.5, 0.9, 0.9, 1.0, 1.0
    ]  # fmt: skip


def test_reasoning_with_the_punchline_lowers_its_perplexity(scorer):
    question, gold = COW["question"], COW["answer"]
    base = scorer.base_perplexity(question, gold)
    helpful = scorer.improvement(question, reply_parts(HELPFUL)[0], gold)
    unrelated = scorer.improvement(question, reply_parts(UNRELATED)[0], gold)
    assert helpful > 0.3 and unrelated < 0 and helpful > unrelated
    assert scorer.perplexity("Question: x\nReasoning: ground beef\nAnswer:", " Ground beef.") < base


async def test_scores_both_ways(tiny_model_dir, scorer):
    env = offline_env(PunchlineEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    env.scorer = scorer
    await env.setup()
    helpful, unrelated = env.score_reply(HELPFUL, COW), env.score_reply(UNRELATED, COW)
    assert helpful > 0.3 and unrelated == 0.0
    for bad in (
        "<think>cows lying on the ground: ground beef</think>Ground beef.\nOr: Steak.",  # hedge
        "<think>cows lying on the ground: ground beef. Ground beef.</think>",  # punchline only in the reasoning
        "<think>cows lying on the ground: ground beef",  # unclosed
        "Ground beef. ground beef ground beef",  # no reasoning
        f"<think>{COW['question']} {COW['question']}</think>Ground beef.",  # echo
    ):
        assert env.score_reply(bad, COW) == 0.0, bad
    env.config.reward_thresholds = True
    assert env.score_reply(HELPFUL, COW) == 1.0 and env.score_reply(UNRELATED, COW) == 0.0


def test_the_committed_reference_model_is_the_built_one(built_reference):
    from safetensors.torch import load_file

    built, committed = (
        load_file(built_reference / "model.safetensors"),
        load_file(REFERENCE / "model.safetensors"),
    )
    assert built.keys() == committed.keys() and all(built[k].equal(committed[k]) for k in built)
    assert (built_reference / "tokenizer.json").read_text() == (REFERENCE / "tokenizer.json").read_text()


def test_the_jokes_filter():
    jokes = load_jokes(str(SAMPLE), 75)
    assert [j["answer"] for j in jokes][:2] == ["Ground beef.", "Because he was outstanding in his field."]
    assert len(jokes) == 6 and len(load_jokes(str(SAMPLE), 100)) == 4
    assert is_joke("Why? ", "Because.", 75, 75) and not is_joke(None, "x", 100, 75)


async def test_split(tiny_model_dir, scorer):
    env = offline_env(PunchlineEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    env.scorer = scorer
    await env.setup()
    assert (len(env.train), len(env.test)) == (3, 3)  # at most half held out
    other = offline_env(PunchlineEnv, tiny_model_dir, dataset_path=str(SAMPLE), eval_dataset_path=str(SAMPLE))
    other.scorer = scorer
    await other.setup()
    assert len(other.train) == len(other.test) == 6


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"title": "Why?", "score": 100}, "row 1: missing field 'selftext'"),
        ({"title": "Why?", "selftext": "x", "score": "lots"}, "row 1: field 'score' must be a number"),
        ({"title": 7, "selftext": "x", "score": 100}, "row 1: field 'title' must be text"),
    ],
)
async def test_bad_local_rows(tiny_model_dir, tmp_path, row, message):
    await bad_rows_error(PunchlineEnv, tiny_model_dir, tmp_path, [read_jsonl(SAMPLE)[0], row], message)


async def test_no_joke_passes_the_filter(tiny_model_dir, tmp_path):
    row = {"title": "A statement.", "selftext": "x", "score": 100}
    await bad_rows_error(PunchlineEnv, tiny_model_dir, tmp_path, [row], "no question-and-answer jokes")


def _responder(prompt, index):
    """Reasoning that names the real punchline for even choices, a hedge for odd ones."""
    text = prompt_text(prompt)
    punchline = next(j["answer"] for j in load_jokes(str(SAMPLE), 75) if j["question"] in text)
    if index % 2:
        return f"<think>Let me think of a few.</think>\n{punchline}\nor something else."
    return f"<think>Something like: {punchline.lower()}</think>\n{punchline}"


def test_process_with_a_local_file(scripted):
    groups = process_local(
        scripted, PunchlineEnv, SAMPLE, _responder, reference_model=REFERENCE, group_size=2, total_steps=2,
        max_tokens=64,
    )  # fmt: skip
    assert len(groups) == 2
    for group in groups:
        assert group["scores"][0] > 0 and group["scores"][1] == 0.0
        assert all(m[0] == -100 and any(x != -100 for x in m) for m in group["masks"])


def test_evaluate(scripted):
    evaluation = evaluate_local(scripted, PunchlineEnv, SAMPLE, _responder, reference_model=REFERENCE)
    metrics = evaluation.metrics
    assert (
        metrics["eval/percent_correct"] == 1.0
        and metrics["eval/mean_reward"] == metrics["eval/mean_score"] > 0
    )
    assert metrics["eval/mean_improvement"] > 0
    assert {s["punchline"] for s in evaluation.samples} == {j["answer"] for j in load_jokes(str(SAMPLE), 75)}


if __name__ == "__main__":
    sys.exit(print(build_reference_model(REFERENCE)))
