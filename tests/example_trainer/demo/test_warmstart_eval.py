"""The demo's building blocks on the real tiny model: supervised warm start (and its cache) and the
greedy held-out evaluation."""

from __future__ import annotations

import json

import pytest
import torch

from example_trainer.demo.heldout_eval import (
    chat_prompt_ids,
    chat_replies,
    evaluate_heldout,
    evaluate_model_dir,
    load_causal_lm,
)
from example_trainer.demo.sft_warmstart import (
    IGNORE_INDEX,
    SftSettings,
    cache_key,
    collate,
    encode_example,
    lr_factor,
    train_sft,
    warm_start,
)
from example_trainer.demo.task import load_task

TASK = {"min_digits": 1, "max_digits": 2, "operations": ["+"], "seed": 3, "eval_size": 12}
ARITHMETIC = load_task("arithmetic", TASK)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_causal_lm(tiny_model_dir)


def test_encode_example_trains_only_the_answer_and_eos(tiny):
    _, tok = tiny
    messages, answer = next(ARITHMETIC.sft_examples(1))
    ids, labels = encode_example(tok, messages, answer)
    prompt = chat_prompt_ids(tok, messages)
    assert ids[: len(prompt)] == prompt
    assert labels[: len(prompt)] == [IGNORE_INDEX] * len(prompt)
    trained = labels[len(prompt) :]
    assert trained == ids[len(prompt) :]
    assert trained[-1] == tok.eos_token_id
    assert tok.decode(trained[:-1]) == answer


def test_collate_right_pads():
    batch = [([5, 6, 7], [IGNORE_INDEX, 6, 7]), ([8], [8])]
    ids, attention, labels = collate(batch, pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert attention.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert labels.tolist() == [[IGNORE_INDEX, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]


def test_lr_schedule_warms_up_then_stays_constant():
    s = SftSettings(steps=100, warmup_steps=10)
    assert lr_factor(0, s) == pytest.approx(0.1)
    assert lr_factor(9, s) == pytest.approx(1.0)
    assert lr_factor(10, s) == lr_factor(99, s) == 1.0
    assert lr_factor(0, SftSettings(steps=5, warmup_steps=0)) == 1.0


def test_train_sft_lowers_the_loss_and_is_deterministic(tiny_model_dir):
    settings = SftSettings(steps=12, batch_size=16, lr=3e-3, warmup_steps=2, seed=1)
    runs = []
    for _ in range(2):
        model, tok = load_causal_lm(tiny_model_dir)
        losses = train_sft(model, tok, ARITHMETIC, settings)
        runs.append((losses, [p.detach().clone() for p in model.parameters()]))
    losses, params = runs[0]
    assert len(losses) == 12
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3
    assert losses == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(params, runs[1][1], strict=True))


def test_warm_start_caches_by_settings(tiny_model_dir, tmp_path):
    settings = SftSettings(steps=3, batch_size=8, warmup_steps=1)
    seen = []
    path, cached = warm_start(
        tiny_model_dir, ARITHMETIC, settings, tmp_path, on_step=lambda s, _l: seen.append(s)
    )
    assert not cached and seen == [0, 1, 2]
    assert path.parent == tmp_path and path.name == f"sft-{cache_key(tiny_model_dir, TASK, settings)}"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "atropos_sft.json"):
        assert (path / name).is_file()
    assert json.loads((path / "atropos_sft.json").read_text())["task"] == TASK
    assert not list(tmp_path.glob(".sft-*"))  # no temporary folder left behind

    again, cached = warm_start(
        tiny_model_dir, ARITHMETIC, settings, tmp_path, on_step=lambda *_: pytest.fail()
    )
    assert cached and again == path

    other = {**TASK, "eval_size": 13}
    assert cache_key(tiny_model_dir, other, settings) != cache_key(tiny_model_dir, TASK, settings)
    more = settings.model_copy(update={"lr": settings.lr / 2})
    assert cache_key(tiny_model_dir, TASK, more) != cache_key(tiny_model_dir, TASK, settings)

    base, cached = warm_start(tiny_model_dir, ARITHMETIC, SftSettings(steps=0), tmp_path)
    assert base == tiny_model_dir and cached


def test_batched_greedy_decoding_matches_one_prompt_at_a_time(tiny):
    model, tok = tiny
    task = ARITHMETIC
    prompts = [item.messages for item in task.heldout()[:5]]
    batched = chat_replies(model, tok, prompts, max_new_tokens=6, batch_size=5)
    single = [chat_replies(model, tok, [p], max_new_tokens=6)[0] for p in prompts]
    assert batched == single
    assert all(isinstance(r, str) for r in batched)


def test_evaluate_heldout_scores_every_eval_problem_with_the_env_scorer(tiny):
    model, tok = tiny
    task = ARITHMETIC
    result = evaluate_heldout(model, tok, task, max_new_tokens=6, batch_size=4)
    assert result.total == len(task.heldout()) == 12
    assert [s.question for s in result.samples] == [item.question for item in task.heldout()]
    assert result.correct == sum(s.correct for s in result.samples)
    assert result.accuracy == result.correct / 12

    # A scorer that accepts everything: the evaluation really applies the given scorer.
    everything = evaluate_heldout(model, tok, task, max_new_tokens=6, score=lambda _r, _a: 1.0)
    assert everything.accuracy == 1.0


def test_sampled_accuracy_counts_every_reply_and_repeats_with_its_seed(tiny):
    model, tok = tiny
    task = ARITHMETIC
    first = evaluate_heldout(model, tok, task, max_new_tokens=6, samples=3, seed=1)
    assert first.total == 3 * len(task.heldout())
    # each problem's three replies are next to each other, graded against that problem
    questions = [item.question for item in task.heldout() for _ in range(3)]
    assert [s.question for s in first.samples] == questions
    again = evaluate_heldout(model, tok, task, max_new_tokens=6, samples=3, seed=1)
    assert [s.reply for s in again.samples] == [s.reply for s in first.samples]
    other = evaluate_heldout(model, tok, task, max_new_tokens=6, samples=3, seed=2)
    assert [s.reply for s in other.samples] != [s.reply for s in first.samples]  # really sampled
    right = evaluate_heldout(
        model, tok, task, max_new_tokens=6, samples=2, score=lambda r, a: float(r == str(a))
    )
    assert right.correct == sum(s.reply == str(s.answer) for s in right.samples)


def test_eval_after_warm_start_is_repeatable(tiny_model_dir, tmp_path):
    task = ARITHMETIC
    path, _ = warm_start(tiny_model_dir, ARITHMETIC, SftSettings(steps=4, batch_size=8), tmp_path)
    first = evaluate_model_dir(path, task, max_new_tokens=6)
    second = evaluate_model_dir(path, task, max_new_tokens=6)
    assert [s.reply for s in first.samples] == [s.reply for s in second.samples]
    assert first.accuracy == second.accuracy
