"""One optimizer step per API batch: warmup LR, micro-batch forward/backward, grad clip, optimizer step."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import torch

from example_trainer.config import TrainingConfig
from example_trainer.data import IGNORE_INDEX, MicroBatch, PreparedBatch
from example_trainer.distributed import (
    DistContext,
    gather_step_sums,
    local_micro_batches,
    no_sync,
    unwrap_model,
)
from example_trainer.loss import compute_grpo_loss, token_logprobs

logger = logging.getLogger(__name__)


def lr_at_step(step: int, lr: float, warmup_steps: int) -> float:
    """Linear warmup over ``warmup_steps`` (``lr * (step + 1) / warmup_steps``), then constant ``lr``.

    ``step`` is the 0-based index of the optimizer step about to run.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    return lr


def create_optimizer(params: Iterable[torch.nn.Parameter], config: TrainingConfig) -> torch.optim.Optimizer:
    """The optimizer named by ``config.optimizer`` over the given (trainable) parameters.

    ``adamw_8bit`` needs ``bitsandbytes`` (and a GPU); without it, it falls back to ``torch.optim.AdamW``
    with a warning. ``adafactor`` is transformers' Adafactor. Raises ``ValueError`` for an empty set.
    """
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("no trainable parameters: nothing to optimise")
    if config.optimizer == "adamw_8bit":
        try:
            import bitsandbytes as bnb

            if not config.device.startswith("cuda"):
                raise ImportError("8-bit AdamW needs a CUDA device")
            return bnb.optim.AdamW8bit(params, lr=config.lr)
        except (ImportError, RuntimeError) as exc:
            logger.warning("optimizer adamw_8bit unavailable (%s); falling back to torch AdamW", exc)
    elif config.optimizer == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(
            params,
            lr=None if config.adafactor_relative_step else config.lr,
            scale_parameter=config.adafactor_scale_parameter,
            relative_step=config.adafactor_relative_step,
            warmup_init=False,
        )
    return torch.optim.AdamW(params, lr=config.lr)


_LOGITS_TO_KEEP_SUPPORTED: dict[type, bool] = {}


def forward_logits(model: Any, tokens: torch.Tensor, keep: int) -> torch.Tensor:
    """Logits of the last ``keep`` positions of ``tokens`` ([B, keep, V]).

    Uses the model's ``logits_to_keep`` argument where it has one, so that the LM head never runs on
    prompt positions; otherwise computes all logits and slices.
    """
    kind = type(model)
    if _LOGITS_TO_KEEP_SUPPORTED.get(kind, True):
        try:
            logits = model(tokens, logits_to_keep=keep).logits
            _LOGITS_TO_KEEP_SUPPORTED[kind] = True
            return logits
        except TypeError:
            _LOGITS_TO_KEEP_SUPPORTED[kind] = False
    return model(tokens).logits[:, -keep:]


def trained_window(labels: torch.Tensor) -> tuple[int, int] | None:
    """``(start, end)``: the smallest column range holding every trained position of a micro-batch
    (None when nothing is trained). Right padding plus causal attention make everything after ``end``
    irrelevant, and positions before ``start`` need hidden states but no logits."""
    cols = (labels != IGNORE_INDEX).any(dim=0).nonzero()
    if cols.numel() == 0:
        return None
    return int(cols[0]), int(cols[-1]) + 1


def _reference_logprobs(
    model: Any,
    ref_model: Any | None,
    tokens: torch.Tensor,
    keep: int,
    labels: torch.Tensor,
    temperatures: torch.Tensor,
) -> torch.Tensor:
    """Label logprobs under the frozen reference: ``ref_model`` or, for PEFT models, the adapter-free base."""
    with torch.no_grad():
        if ref_model is not None:
            logits = forward_logits(ref_model, tokens, keep)
        elif hasattr(model, "disable_adapter"):
            with model.disable_adapter():
                logits = forward_logits(model, tokens, keep)
        else:
            raise ValueError("kl_coef > 0 needs a reference model")
        return token_logprobs(logits, labels, temperatures)


def _participate(model: Any, device: str) -> None:
    """A zero-weight forward/backward, so a rank with nothing to train still joins gradient sync."""
    tokens = torch.zeros((1, 1), dtype=torch.long, device=device)
    (forward_logits(model, tokens, 1).sum() * 0.0).backward()


def run_training_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: PreparedBatch,
    config: TrainingConfig,
    step: int,
    ref_model: Any | None = None,
    dist: DistContext | None = None,
) -> dict[str, float]:
    """Train on one API batch and take one optimizer step; returns averaged metrics.

    ``step`` is the 0-based index of this optimizer step (it sets the warmup LR). Each sequence's loss
    counts ``1 / N`` of the batch of ``N`` sequences, so the update is the same whatever the micro-batch
    size. Gradients are clipped to ``config.max_grad_norm`` (1.0 by default).

    With ``dist`` (several ranks; ``model`` wrapped by :func:`~example_trainer.distributed.wrap_model`),
    ``batch`` is the global batch held by every rank: each rank trains its shard, gradients are averaged
    once per step, and the metrics (loss included) describe the whole batch, as with one process.

    Each micro-batch only runs the columns up to its last trained position, and the LM head only on
    the columns from its first trained position: padding and prompt-only columns cost nothing, and the
    result is the same as on the full padded batch.
    """
    ctx = dist or DistContext(device=config.device)
    lr = lr_at_step(step, config.lr, config.warmup_steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    device = ctx.device
    micro: list[MicroBatch | None] = (
        local_micro_batches(batch, ctx, config.batch_size) if ctx.enabled else list(batch.micro_batches)
    )
    n_global = batch.num_sequences
    sums: dict[str, float] = {}
    total_loss = 0.0
    start = time.perf_counter()
    computed = 0
    for index, mb in enumerate(micro):
        window = trained_window(mb.labels) if mb is not None else None
        with no_sync(model, last=index == len(micro) - 1):
            if mb is None or window is None:  # nothing to learn from this micro-batch
                if ctx.enabled:
                    _participate(model, device)
                continue
            first, end = window
            keep = end - first
            tokens = mb.tokens[:, :end].to(device, non_blocking=True)
            labels = mb.labels[:, first:end].to(device, non_blocking=True)
            advantages = mb.advantages if mb.advantages.shape[1] == 1 else mb.advantages[:, first:end]
            lam = None if mb.inference_logprobs is None else mb.inference_logprobs[:, first:end].to(device)
            temps = mb.temperatures.to(device)
            ref_lp = None
            if config.kl_coef > 0:
                ref_lp = _reference_logprobs(unwrap_model(model), ref_model, tokens, keep, labels, temps)
            logits = forward_logits(model, tokens, keep)
            out = compute_grpo_loss(
                logits,
                labels,
                advantages.to(device),
                temps,
                lam,
                clip_eps=config.clip_eps,
                # sequence weight 1/N; gradient averaging over ranks divides by the world size once more
                gradient_accumulation_steps=n_global / (mb.num_sequences * ctx.world_size),
                kl_coef=config.kl_coef,
                ref_logprobs=ref_lp,
            )
            out.loss.backward()
        computed += 1
        total_loss += float(out.loss.detach())
        for key, value in out.metrics.items():
            sums[key] = sums.get(key, 0.0) + value
        del logits, out
    params = [p for g in optimizer.param_groups for p in g["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    sums, computed, total_loss = gather_step_sums(ctx, sums, computed, total_loss)
    elapsed = time.perf_counter() - start

    averaged = max(computed, 1)
    metrics = {k: v / averaged for k, v in sums.items() if not k.endswith("_count") and k != "trained_tokens"}
    metrics.update({k: v for k, v in sums.items() if k.endswith("_count") or k == "trained_tokens"})
    metrics.update(
        loss=total_loss,
        lr=lr,
        grad_norm=float(grad_norm),
        step_time_s=elapsed,
        tokens_per_s=batch.num_tokens / elapsed if elapsed > 0 else 0.0,
        kept_reward_mean=batch.mean_score,
        num_sequences=float(batch.num_sequences),
        num_tokens=float(batch.num_tokens),
    )
    return metrics
