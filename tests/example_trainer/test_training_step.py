"""Optimizer step on the tiny model: warmup, optimizers, micro-batch invariance, layer filter, LoRA + KL."""

from __future__ import annotations

import logging

import pytest
import torch

from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.data import prepare_batch
from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters
from example_trainer.grpo.step import create_optimizer, lr_at_step, run_training_step
from tests.helpers.trainer import make_group


def _config(tiny_model_dir, tmp_path, **kw) -> TrainingConfig:
    base = dict(
        model_name=str(tiny_model_dir), device="cpu", optimizer="adamw", save_path=str(tmp_path), lr=1e-3
    )
    base.update(kw)
    return TrainingConfig(**base)


def _groups(seed=0):
    return [make_group(n=4, seed=seed + i, scores=[1.0, 0.0, 0.5, 0.0]) for i in range(2)]


def test_warmup_schedule():
    assert [lr_at_step(s, 1.0, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_at_step(0, 2e-5, 0) == 2e-5


def test_optimizer_choice(tiny_model_dir, tmp_path, caplog):
    params = [torch.nn.Parameter(torch.zeros(3))]
    with caplog.at_level(logging.WARNING):
        opt = create_optimizer(params, _config(tiny_model_dir, tmp_path, optimizer="adamw_8bit"))
    assert type(opt) is torch.optim.AdamW
    assert any("falling back to torch AdamW" in r.message for r in caplog.records)
    from transformers.optimization import Adafactor

    assert isinstance(
        create_optimizer(params, _config(tiny_model_dir, tmp_path, optimizer="adafactor")), Adafactor
    )
    frozen = [torch.nn.Parameter(torch.zeros(3), requires_grad=False)]
    with pytest.raises(ValueError, match="no trainable parameters"):
        create_optimizer(frozen, _config(tiny_model_dir, tmp_path))


def test_step_updates_weights_and_reports_metrics(tiny_model_dir, tmp_path):
    cfg = _config(tiny_model_dir, tmp_path, batch_size=2, warmup_steps=2, max_grad_norm=0.5)
    model, _ = load_model_and_tokenizer(cfg)
    assert next(model.parameters()).dtype == torch.float32
    assert model.config._attn_implementation == "sdpa"
    opt = create_optimizer(trainable_parameters(model), cfg)
    before = [p.detach().clone() for p in model.parameters()]
    batch = prepare_batch(_groups(), cfg.batch_size)
    m = run_training_step(model, opt, batch, cfg, step=0)
    assert m["lr"] == pytest.approx(5e-4)
    assert m["num_sequences"] == 8 and m["tokens_per_s"] > 0 and m["grad_norm"] > 0
    assert m["kept_reward_mean"] == pytest.approx(0.375)
    assert all(p.grad is None for p in model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def _grads_after_step(tiny_model_dir, tmp_path, micro):
    torch.manual_seed(0)
    cfg = _config(tiny_model_dir, tmp_path, batch_size=micro, max_grad_norm=1e9)
    model, _ = load_model_and_tokenizer(cfg)
    grads = {}

    class Capture(torch.optim.SGD):
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    grads[id(p)] = p.grad.detach().clone()
            return super().step(closure)

    params = trainable_parameters(model)
    opt = Capture(params, lr=0.0)
    groups = [make_group(n=4, lengths=[9, 9, 9, 9], seed=3, scores=[1.0, 0.0, 0.5, 0.0])]
    groups[0]["inference_logprobs"] = [[-1.0] * 9 for _ in range(4)]
    run_training_step(model, opt, prepare_batch(groups, micro), cfg, step=0)
    return [grads[id(p)] for p in params]


def test_update_does_not_depend_on_micro_batch_size(tiny_model_dir, tmp_path):
    whole = _grads_after_step(tiny_model_dir, tmp_path, micro=4)
    split = _grads_after_step(tiny_model_dir, tmp_path, micro=2)
    for a, b in zip(whole, split, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_train_layer_indices_freeze_everything_else(tiny_model_dir, tmp_path):
    cfg = _config(tiny_model_dir, tmp_path, train_layer_indices="1")
    model, _ = load_model_and_tokenizer(cfg)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)
    with pytest.raises(ValueError, match="layers \\[7\\] do not exist"):
        load_model_and_tokenizer(_config(tiny_model_dir, tmp_path, train_layer_indices="7"))


def test_lora_trains_adapters_only_and_kl_uses_the_base(tiny_model_dir, tmp_path):
    cfg = _config(
        tiny_model_dir, tmp_path, weight_bridge_mode="lora_only", lora_r=4, kl_coef=0.1, batch_size=4
    )
    model, _ = load_model_and_tokenizer(cfg)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert all(("q_proj" in n or "v_proj" in n) for n in trainable)
    opt = create_optimizer(trainable_parameters(model), cfg)
    batch = prepare_batch(_groups(), cfg.batch_size)
    first = run_training_step(model, opt, batch, cfg, step=0)
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # B = 0 at init: policy == base
    second = run_training_step(model, opt, batch, cfg, step=1)
    assert second["kl"] > 0


def test_windowed_step_equals_the_full_padded_computation(tiny_model_dir, tmp_path):
    """The step skips padding columns and prompt-only logits; the gradient must not change."""
    from example_trainer.grpo.loss import compute_grpo_loss

    cfg = _config(tiny_model_dir, tmp_path, batch_size=4, max_grad_norm=1e9)
    model, _ = load_model_and_tokenizer(cfg)
    group = make_group(lengths=[30, 12, 21, 9], prompt_len=6, seed=7, scores=[1.0, 0.0, 0.0, 1.0])
    group["inference_logprobs"] = [[1.0] * 6 + [-2.0] * (n - 6) for n in (30, 12, 21, 9)]
    group["overrides"] = [{"temperature": 0.7}, {}, {}, {}]
    batch = prepare_batch([group], 4)
    mb = batch.micro_batches[0]
    assert mb.tokens.shape[1] == 64

    out = compute_grpo_loss(
        model(mb.tokens).logits,
        mb.labels,
        mb.advantages,
        mb.temperatures,
        mb.inference_logprobs,
        clip_eps=0.2,
    )
    out.loss.backward()
    params = trainable_parameters(model)
    expected = [p.grad.detach().clone() for p in params]
    model.zero_grad(set_to_none=True)

    captured = []

    class Capture(torch.optim.SGD):
        def step(self, closure=None):
            captured.extend(p.grad.detach().clone() for p in params)

    metrics = run_training_step(model, Capture(params, lr=0.0), batch, cfg, step=0)
    assert metrics["loss"] == pytest.approx(out.loss.item(), rel=1e-5)
    for a, b in zip(expected, captured, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
