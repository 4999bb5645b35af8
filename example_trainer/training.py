"""One optimizer step per API batch: warmup LR, micro-batch forward/backward, grad clip, optimizer step."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import torch

from example_trainer.config import TrainingConfig
from example_trainer.data import PreparedBatch
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


def _reference_logprobs(
    model: Any, ref_model: Any | None, tokens: torch.Tensor, labels: torch.Tensor, temperatures: torch.Tensor
) -> torch.Tensor:
    """Label logprobs under the frozen reference: ``ref_model`` or, for PEFT models, the adapter-free base."""
    with torch.no_grad():
        if ref_model is not None:
            logits = ref_model(tokens).logits
        elif hasattr(model, "disable_adapter"):
            with model.disable_adapter():
                logits = model(tokens).logits
        else:
            raise ValueError("kl_coef > 0 needs a reference model")
        return token_logprobs(logits, labels, temperatures)


def run_training_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: PreparedBatch,
    config: TrainingConfig,
    step: int,
    ref_model: Any | None = None,
) -> dict[str, float]:
    """Train on one API batch and take one optimizer step; returns averaged metrics.

    ``step`` is the 0-based index of this optimizer step (it sets the warmup LR). The loss of each
    micro-batch is divided by the number of micro-batches, so the update is the same whatever the
    micro-batch size. Gradients are clipped to ``config.max_grad_norm`` (1.0 by default).
    """
    lr = lr_at_step(step, config.lr, config.warmup_steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    device = config.device
    n_micro = len(batch.micro_batches)
    sums: dict[str, float] = {}
    total_loss = 0.0
    start = time.perf_counter()
    for mb in batch.micro_batches:
        tokens = mb.tokens.to(device, non_blocking=True)
        labels = mb.labels.to(device, non_blocking=True)
        temps = mb.temperatures.to(device)
        ref_lp = None
        if config.kl_coef > 0:
            ref_lp = _reference_logprobs(model, ref_model, tokens, labels, temps)
        logits = model(tokens).logits
        out = compute_grpo_loss(
            logits,
            labels,
            mb.advantages.to(device),
            temps,
            None if mb.inference_logprobs is None else mb.inference_logprobs.to(device),
            clip_eps=config.clip_eps,
            gradient_accumulation_steps=n_micro,
            kl_coef=config.kl_coef,
            ref_logprobs=ref_lp,
        )
        out.loss.backward()
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
    elapsed = time.perf_counter() - start

    metrics = {k: v / n_micro for k, v in sums.items() if not k.endswith("_count") and k != "trained_tokens"}
    metrics.update({k: v for k, v in sums.items() if k.endswith("_count") or k == "trained_tokens"})
    metrics.update(
        loss=total_loss,
        lr=lr,
        grad_norm=float(grad_norm),
        step_time_s=elapsed,
        tokens_per_s=batch.num_tokens / elapsed if elapsed > 0 else 0.0,
        reward_mean=batch.mean_score,
        num_sequences=float(batch.num_sequences),
        num_tokens=float(batch.num_tokens),
    )
    return metrics
