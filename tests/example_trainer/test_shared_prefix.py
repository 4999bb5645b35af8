"""Training on shared prompts once per group gives the loss and gradients of the row-by-row computation."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.data import prepare_batch
from example_trainer.grpo.model import load_model_and_tokenizer
from example_trainer.grpo.step import run_training_step, shared_prefix_layout, supports_shared_prefixes
from tests.helpers.trainer import make_group


def _shared_prompt_groups(seed=0, with_logprobs=True):
    """Groups whose rows share their prompt (lengths differ between groups), completions of 1-6 tokens."""
    rng = random.Random(seed)
    groups = []
    for prompt_len in (5, 9, 7):
        prompt = [rng.randint(5, 500) for _ in range(prompt_len)]
        tokens, masks, logprobs = [], [], []
        for _ in range(4):
            completion = [rng.randint(5, 500) for _ in range(rng.randint(1, 6))]
            tokens.append(prompt + completion)
            masks.append([-100] * prompt_len + completion)
            logprobs.append([1.0] * prompt_len + [-rng.uniform(3, 8) for _ in completion])
        group = make_group(n=4, scores=[1.0, 0.0, 1.0, 0.0] if prompt_len != 9 else [0.0, 0.0, 1.0, 0.0])
        group.update(tokens=tokens, masks=masks, inference_logprobs=logprobs if with_logprobs else None)
        groups.append(group)
    return groups


@pytest.mark.parametrize("with_logprobs", [True, False])
def test_shared_prefixes_give_the_same_update(tiny_model_dir, tmp_path, with_logprobs):
    cfg = TrainingConfig(
        model_name=str(tiny_model_dir),
        device="cpu",
        optimizer="adamw",
        save_path=str(tmp_path),
        batch_size=12,
    )
    model, _ = load_model_and_tokenizer(cfg)
    assert supports_shared_prefixes(model)  # so the trainer's default shares them
    twin = copy.deepcopy(model)
    batch = prepare_batch(_shared_prompt_groups(with_logprobs=with_logprobs), cfg.batch_size)
    assert shared_prefix_layout(batch.micro_batches[0]) is not None
    results = []
    for m, share in ((model, True), (twin, False)):
        before = [p.detach().clone() for p in m.parameters()]
        opt = torch.optim.SGD(m.parameters(), lr=1.0)  # the parameter change is minus the (clipped) gradient
        metrics = run_training_step(m, opt, batch, cfg, step=0, share_prefixes=share)
        deltas = [(p.detach() - b) for p, b in zip(m.parameters(), before, strict=True)]
        results.append((metrics, deltas))
    (shared, d_shared), (plain, d_plain) = results
    assert shared["loss"] == pytest.approx(plain["loss"], abs=1e-6)
    assert shared["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    assert plain["grad_norm"] > 0
    for a, b in zip(d_shared, d_plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_layout_only_when_rows_share_prompts():
    distinct = prepare_batch([make_group(n=4, seed=i) for i in range(2)], 8).micro_batches[0]
    assert shared_prefix_layout(distinct) is None
    shared = prepare_batch(_shared_prompt_groups(), 12).micro_batches[0]
    layout = shared_prefix_layout(shared)
    assert layout.prefix_ids.shape[0] == 3
    assert layout.row_prefix.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    # every trained label of the batch, in order, once
    trained = shared.labels[shared.labels != -100].tolist()
    assert layout.suffix_labels[layout.suffix_labels != -100].tolist() == trained


def test_models_that_cannot_take_a_cache_train_row_by_row():
    class NoCache(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return input_ids

    class PassesOn(torch.nn.Module):
        def forward(self, input_ids, **kwargs):
            return input_ids

    assert not supports_shared_prefixes(NoCache())
    assert supports_shared_prefixes(PassesOn())
