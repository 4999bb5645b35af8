"""Micro-batches without padding waste: token budgets, packed rows, chunked log-probabilities.

The packed (one row, position ids restarting per sequence) and chunked (output head a few positions at a
time) computations must give the log-probabilities and gradients of the plain padded computation with
full logits; token-budget micro-batches must stay within their budget and carry every per-token field of
their rows unchanged.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from example_trainer.grpo.data import IGNORE_INDEX, MicroBatch, prepare_batch
from example_trainer.grpo.distributed import DistContext, local_micro_batches
from example_trainer.grpo.logprobs import packs_efficiently, plain_output_head, sequence_logprobs
from example_trainer.grpo.loss import token_logprobs
from example_trainer.grpo.packing import (
    batch_rows,
    micro_batch_tokens,
    micro_batches,
    plan_micro_batches,
    row_lengths,
    select_rows,
)
from tests.helpers.trainer import make_group

LENGTHS = [37, 5, 22, 13, 30, 2]  # a mixed-length batch, as RL produces


@pytest.fixture(scope="module")
def model64(tiny_model_dir):
    """The tiny model in float64, so that the comparisons measure the method, not float32 rounding."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, dtype=torch.float64, attn_implementation="sdpa"
    )
    return model.train()


def _rows(vocab: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``tokens``/``labels`` [B, K] right-padded, prompt positions unscored; temperatures [B, 1, 1];
    teacher top-3 ids [B, K, 3] (-1 where absent)."""
    g = torch.Generator().manual_seed(seed)
    b, k = len(LENGTHS), max(LENGTHS) + 3
    tokens = torch.zeros((b, k), dtype=torch.long)
    labels = torch.full((b, k), IGNORE_INDEX)
    for row, n in enumerate(LENGTHS):
        seq = torch.randint(3, vocab, (n + 1,), generator=g)
        tokens[row, :n] = seq[:n]
        labels[row, min(2, n - 1) : n] = seq[min(2, n - 1) + 1 : n + 1]
    temperatures = torch.tensor([1.0, 0.7, 1.3, 0.0, 1.0, 0.5], dtype=torch.float64).view(b, 1, 1)
    extra = torch.randint(0, vocab, (b, k, 3), generator=g)
    extra = torch.where((labels != IGNORE_INDEX).unsqueeze(-1), extra, -1)
    extra[0, -5:, 1] = -1  # padding inside a position's top-k
    return tokens, labels, temperatures, extra


def _full_logits_reference(model, tokens, labels, temperatures, extra):
    """Log-probabilities from the model's full padded logits: the computation being replaced."""
    logits = model(tokens).logits  # [B, K, V]
    logp = token_logprobs(logits, labels, temperatures)
    t = torch.where(temperatures > 0, temperatures, torch.ones_like(temperatures))
    all_logp = torch.log_softmax(logits.float() / t, dim=-1)
    topk = torch.where(extra >= 0, all_logp.gather(-1, extra.clamp(min=0)), 0.0)
    return logp, topk


def _value_and_grads(model, compute):
    """``compute()`` -> (logp, topk); returns them with the gradient of a fixed random weighting of both."""
    model.zero_grad(set_to_none=True)
    logp, topk = compute()
    g = torch.Generator().manual_seed(5)
    weights = torch.randn(logp.shape, generator=g, dtype=torch.float64)
    weights_k = torch.randn(topk.shape, generator=g, dtype=torch.float64)
    ((logp * weights).sum() + (topk * weights_k).sum()).backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return logp.detach(), topk.detach(), grads


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("chunk", [5, None], ids=["chunk5", "one-chunk"])
def test_packed_and_chunked_logprobs_equal_the_full_logits(model64, packed, chunk):
    tokens, labels, temperatures, extra = _rows(model64.config.vocab_size)
    assert plain_output_head(model64) is not None
    want = _value_and_grads(
        model64, lambda: _full_logits_reference(model64, tokens, labels, temperatures, extra)
    )
    got = _value_and_grads(
        model64,
        lambda: sequence_logprobs(
            model64, tokens, labels, temperatures, extra_ids=extra, packed=packed, chunk_tokens=chunk
        ),
    )
    torch.testing.assert_close(got[0].double(), want[0].double(), rtol=0, atol=1e-5)
    torch.testing.assert_close(got[1].double(), want[1].double(), rtol=0, atol=1e-5)
    assert bool((got[0] != 0).sum() == (labels != IGNORE_INDEX).sum())
    for name, grad in want[2].items():
        scale = float(grad.abs().max()) or 1.0
        assert float((got[2][name] - grad).abs().max()) <= 1e-5 * scale, name


def test_packing_keeps_sequences_apart(model64):
    """Packed rows see only their own tokens: changing one sequence leaves the others' log-probabilities."""
    tokens, labels, temperatures, _ = _rows(model64.config.vocab_size)
    with torch.no_grad():
        before, _ = sequence_logprobs(model64, tokens, labels, temperatures, packed=True)
        changed = tokens.clone()
        changed[2, :20] = (changed[2, :20] + 1) % model64.config.vocab_size
        after, _ = sequence_logprobs(model64, changed, labels, temperatures, packed=True)
    others = [r for r in range(len(LENGTHS)) if r != 2]
    torch.testing.assert_close(after[others], before[others], rtol=0, atol=1e-12)
    assert float((after[2] - before[2]).abs().max()) > 1e-3


def test_models_that_change_logits_after_the_head_get_full_logits(model64):
    """A soft-capped model's head output is not its logits: the chunked head is not used for it."""
    assert not packs_efficiently(model64)  # SDPA: packing would cost the whole square
    model64.config.final_logit_softcapping = 30.0
    try:
        assert plain_output_head(model64) is None
    finally:
        model64.config.final_logit_softcapping = None
    assert plain_output_head(model64) is not None


# --- micro-batch plans ------------------------------------------------------------------------------


@pytest.mark.parametrize("packed", [False, True], ids=["sorted", "packed"])
def test_token_budget_is_never_exceeded(packed):
    rng = random.Random(11)
    for _ in range(200):
        lengths = [
            rng.choice([rng.randint(0, 40), rng.randint(100, 2000)]) for _ in range(rng.randint(1, 40))
        ]
        budget = rng.randint(max(lengths) if lengths else 1, 6000)
        plan = plan_micro_batches(lengths, micro_batch_size=4, token_budget=budget, packed=packed)
        assert sorted(i for group in plan for i in group) == list(range(len(lengths)))
        for group in plan:
            assert micro_batch_tokens([lengths[i] for i in group], packed) <= budget
        if packed:  # first-fit decreasing: no two micro-batches could be merged
            sizes = sorted(micro_batch_tokens([lengths[i] for i in g], True) for g in plan)
            assert len(sizes) < 2 or sizes[0] + sizes[1] > budget


def test_a_row_longer_than_the_budget_is_alone_and_sorting_groups_equal_lengths():
    lengths = [500, 120, 30, 118, 33, 119, 29, 31]
    plan = plan_micro_batches(lengths, micro_batch_size=2, token_budget=360)
    assert [0] in plan
    assert sorted(plan) == [[0], [1, 3, 5], [2, 4, 6, 7]]  # 3 x 120 and 4 x 33: rows of near-equal length
    assert plan_micro_batches(lengths, micro_batch_size=3) == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7],
    ]  # no budget: as before


def _batch_with_every_field(n: int = 7) -> MicroBatch:
    """A micro-batch whose every tensor field holds distinct values per row (so mixing rows shows)."""
    groups = [make_group(n=n, seed=4, prompt_len=2, lengths=[5, 17, 9, 3, 12, 8, 14][:n])]
    rows = batch_rows(prepare_batch(groups, 2).micro_batches)
    b, k = rows.labels.shape
    values = {}
    for f in dataclasses.fields(MicroBatch):
        current = getattr(rows, f.name)
        shape = current.shape if current is not None else (b, k, 3)
        dtype = current.dtype if current is not None else torch.float32
        values[f.name] = torch.arange(torch.Size(shape).numel()).reshape(shape).to(dtype) + 100
    values["labels"] = rows.labels
    return MicroBatch(**values)


def test_every_per_token_field_travels_with_its_row():
    rows = _batch_with_every_field()
    index = [5, 0, 3]
    picked = select_rows(rows, index)
    for f in dataclasses.fields(MicroBatch):
        assert torch.equal(getattr(picked, f.name), getattr(rows, f.name)[index]), f.name
    joined = batch_rows([select_rows(rows, [0, 1, 2]), select_rows(rows, [3, 4, 5, 6])])
    for f in dataclasses.fields(MicroBatch):
        assert torch.equal(getattr(joined, f.name), getattr(rows, f.name)), f.name


def test_micro_batches_regroup_rows_and_ranks_get_equal_counts():
    groups = [make_group(n=4, seed=s, prompt_len=3, lengths=[40, 8, 25, 6]) for s in range(3)]
    groups[1]["inference_logprobs"] = [[-0.5] * n for n in (40, 8, 25, 6)]
    batch = prepare_batch(groups, 4)
    rows = batch_rows(batch.micro_batches)
    lengths = row_lengths(rows.labels)
    plan = micro_batches(batch, micro_batch_size=4, token_budget=64, packed=True)
    row_of = {tuple(r.tolist()): i for i, r in enumerate(rows.labels)}
    seen = []
    for mb in plan:
        assert sum(row_lengths(mb.labels)) <= 64
        index = [row_of[tuple(r.tolist())] for r in mb.labels]
        seen += index
        known = ~torch.isnan(rows.inference_logprobs[index])
        if bool(known.any()):  # the rollout logprobs came along, row by row
            torch.testing.assert_close(mb.inference_logprobs, rows.inference_logprobs[index], equal_nan=True)
        else:  # no row of this micro-batch has any: None, as prepare_batch leaves it
            assert mb.inference_logprobs is None
    assert sorted(seen) == list(range(12)) and len(plan) > 1
    per_rank = [
        local_micro_batches(batch, DistContext(rank=r, world_size=2), 4, token_budget=64, packed=True)
        for r in range(2)
    ]
    assert len(per_rank[0]) == len(per_rank[1])
    assert sum(mb.num_sequences for part in per_rank for mb in part if mb is not None) == 12
    assert max(lengths) == 39 and sum(lengths) > 64  # the last token of a row is input to nothing


# --- the optimizer step -----------------------------------------------------------------------------


def _mixed_length_batch():
    """Two groups of completions from 3 to 60 tokens, with rollout logprobs and a temperature."""
    lengths = [[64, 9, 30, 5], [17, 48, 12, 40]]
    groups = []
    for seed, group_lengths in enumerate(lengths):
        group = make_group(lengths=group_lengths, prompt_len=4, seed=20 + seed, scores=[1.0, 0.0, 0.5, 0.0])
        group["inference_logprobs"] = [
            [1.0] * 4 + [-1.5 - 0.01 * i for i in range(n - 4)] for n in group_lengths
        ]
        group["overrides"] = [{"temperature": 0.8}, {}, {}, {"temperature": 1.2}]
        groups.append(group)
    return groups


def _step(tiny_model_dir, tmp_path, share_prefixes=False, **settings):
    """(loss, gradients) of one step of ``run_training_step`` on the float64 tiny model."""
    from example_trainer.grpo.config import TrainingConfig
    from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters
    from example_trainer.grpo.step import run_training_step

    cfg = TrainingConfig(
        model_name=str(tiny_model_dir), device="cpu", optimizer="adamw", save_path=str(tmp_path),
        max_grad_norm=1e9, micro_batch_size=3, **settings,
    )  # fmt: skip
    model, _ = load_model_and_tokenizer(cfg)
    model.double()
    params = trainable_parameters(model)
    grads: list[torch.Tensor] = []

    class Capture(torch.optim.SGD):
        def step(self, closure=None):
            grads.extend(p.grad.detach().clone() for p in params)

    batch = prepare_batch(_mixed_length_batch(), cfg.batch_size)
    metrics = run_training_step(
        model, Capture(params, lr=0.0), batch, cfg, step=0, share_prefixes=share_prefixes
    )
    return metrics["loss"], grads


LAYOUTS = {
    "batch-size rows, padded": {},
    "token budget, sorted and padded": {"micro_batch_tokens": 100, "sequence_packing": "off"},
    "token budget, packed": {"micro_batch_tokens": 100, "sequence_packing": "on"},
    "batch-size rows, packed, small head chunks": {"sequence_packing": "on", "logprob_chunk_tokens": 7},
    "one packed micro-batch": {"micro_batch_tokens": 10_000, "sequence_packing": "on"},
}


@pytest.fixture(scope="module")
def full_logits_step(tiny_model_dir, tmp_path_factory):
    """The step as the loss sees it with the whole batch's padded full logits in one micro-batch."""
    from example_trainer.grpo.config import TrainingConfig
    from example_trainer.grpo.loss import StepTotals, compute_grpo_loss
    from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters

    cfg = TrainingConfig(
        model_name=str(tiny_model_dir), device="cpu", save_path=str(tmp_path_factory.mktemp("ref"))
    )
    model, _ = load_model_and_tokenizer(cfg)
    model.double()
    batch = prepare_batch(_mixed_length_batch(), 8)
    (mb,) = batch.micro_batches
    totals = StepTotals(sequences=8, tokens=batch.num_trained_tokens, longest=batch.longest_completion)
    out = compute_grpo_loss(
        model(mb.tokens).logits, mb.labels, mb.advantages, mb.temperatures, mb.inference_logprobs,
        settings=cfg.loss_settings, totals=totals,
    )  # fmt: skip
    out.loss.backward()
    return float(out.loss.detach()), [p.grad.detach().clone() for p in trainable_parameters(model)]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_gives_the_loss_and_gradients_of_full_padded_logits(
    tiny_model_dir, tmp_path, full_logits_step, layout
):
    want_loss, want_grads = full_logits_step
    loss, grads = _step(tiny_model_dir, tmp_path, **LAYOUTS[layout])
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for got, want in zip(grads, want_grads, strict=True):
        assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())


def test_shared_prefixes_still_give_the_same_step(tiny_model_dir, tmp_path, full_logits_step):
    want_loss, want_grads = full_logits_step
    loss, grads = _step(tiny_model_dir, tmp_path, share_prefixes=True)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for got, want in zip(grads, want_grads, strict=True):
        assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
