"""The GRPO loss, in one function.

Shapes: ``B`` sequences, ``K`` positions, ``V`` vocabulary entries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from example_trainer.data import IGNORE_INDEX
from example_trainer.reporting import WarnOnce

logger = logging.getLogger(__name__)

_warn_once = WarnOnce(logger)
#: The keys warned about so far (clear it to warn again).
_WARNED = _warn_once.seen


@dataclass
class LossOutput:
    """The differentiable loss of one micro-batch and detached statistics about it."""

    loss: torch.Tensor  #: scalar, already divided by ``gradient_accumulation_steps``
    metrics: dict[str, float]
    token_logprobs: torch.Tensor  #: [B, K] detached current-policy logprobs (0 where not trained)
    mask: torch.Tensor  #: [B, K] bool, trained positions


def token_logprobs(
    logits: torch.Tensor, labels: torch.Tensor, temperatures: torch.Tensor | None
) -> torch.Tensor:
    """Log-probability of each label under temperature-scaled logits.

    ``logits`` [B, K, V], ``labels`` [B, K] (-100 = not trained), ``temperatures`` [B, 1, 1] or None.
    Returns [B, K] float32 with 0 at ignored positions. Temperatures <= 0 count as 1 (greedy rollouts).
    """
    logits = logits.float()
    if temperatures is not None:
        t = temperatures.to(device=logits.device, dtype=logits.dtype)
        logits = logits / torch.where(t > 0, t, torch.ones_like(t))
    b, k, v = logits.shape
    nll = F.cross_entropy(
        logits.reshape(b * k, v), labels.reshape(b * k), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return -nll.view(b, k)


def compute_grpo_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    advantages: torch.Tensor,
    temperatures: torch.Tensor | None,
    inference_logprobs: torch.Tensor | None,
    clip_eps: float = 0.2,
    gradient_accumulation_steps: float = 1,
    kl_coef: float = 0.0,
    ref_logprobs: torch.Tensor | None = None,
) -> LossOutput:
    r"""Clipped-surrogate GRPO loss of one micro-batch.

    Inputs:
        logits: [B, K, V] current policy logits (any float dtype; computed in float32).
        labels: [B, K] target token ids, -100 where not trained; ``m = labels != -100``.
        advantages: [B, 1] per sequence, or [B, K] per token. Sequence advantages come from
            :func:`example_trainer.data.normalize_scores`: the group's scores minus their mean, divided by
            the group's population standard deviation (``ddof=0``, floored at 1e-8). TRL's GRPOTrainer
            divides by the sample standard deviation (``ddof=1``) plus 1e-4 instead, so for a group of
            ``n`` its advantages are smaller by about ``sqrt((n - 1) / n)`` (0.94 for ``n = 8``).
        temperatures: [B, 1, 1] sampling temperature of each sequence (None = 1).
        inference_logprobs: [B, K] log-probability of each label under the rollout policy, as captured
            by the inference server; ``NaN`` where unknown; None when unknown for every sequence.
        ref_logprobs: [B, K] label log-probabilities under the frozen reference model (needed when
            ``kl_coef > 0``).

    With ``l`` the current log-probability (temperature-scaled logits), ``lam`` the rollout's, and
    ``eps = clip_eps``:

    .. math::

        r_{bt} = \exp(l_{bt} - \lambda_{bt}),\qquad
        L_{bt} = -\min\big(r_{bt} A_{bt},\ \mathrm{clip}(r_{bt}, 1-\epsilon, 1+\epsilon) A_{bt}\big)
                 + \beta\,\big(e^{\rho_{bt} - l_{bt}} - (\rho_{bt} - l_{bt}) - 1\big)

        \mathrm{loss} = \frac{1}{G}\cdot\frac{1}{B}\sum_b \frac{\sum_t m_{bt} L_{bt}}{\max(\sum_t m_{bt}, 1)}

    where ``beta = kl_coef``, ``rho`` the reference log-probability (the k3 estimator of KL(pi || ref),
    unbiased and always >= 0) and ``G = gradient_accumulation_steps``: a token mean per sequence, a mean
    over sequences, and scaling for gradient accumulation (``G`` may be fractional: the trainer passes
    ``N / B`` so that every sequence of an ``N``-sequence batch weighs ``1 / N``).

    This is standard PPO clipping for both signs of the advantage: the pessimistic (smaller) of the
    clipped and unclipped objectives. For ``A < 0`` the gradient vanishes once ``r < 1 - eps`` (the
    token is already pushed down far enough) and is kept for ``r > 1 + eps``. The original trainer
    used ``-max(r A, clip(r) A)`` for ``A < 0``, which mirrors that: it zeroes the gradient exactly
    where the policy has drifted towards a bad token (``r > 1 + eps``) and keeps pushing once
    ``r < 1 - eps``. Both agree for ``A >= 0`` and inside the clip range.

    Where ``lam`` is unknown (no ``inference_logprobs``), the ratio is taken against the current policy
    itself, ``r = exp(l - stopgrad(l)) = 1`` with gradient ``grad l`` (plain on-policy policy gradient),
    and one warning is logged.
    """
    mask = labels != IGNORE_INDEX  # [B, K]
    logp = token_logprobs(logits, labels, temperatures)  # [B, K]
    adv = advantages.to(device=logp.device, dtype=logp.dtype)  # [B, 1] or [B, K]
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)

    if inference_logprobs is None:
        _warn_once(
            "no-logprobs",
            "batch has no inference_logprobs: using the on-policy ratio (r = 1); importance sampling is off",
        )
        old_logp = logp.detach()
        known = torch.zeros_like(mask)
    else:
        lam = inference_logprobs.to(device=logp.device, dtype=logp.dtype)  # [B, K]
        known = ~torch.isnan(lam) & mask
        if (~known & mask).any():
            _warn_once(
                "partial-logprobs",
                "some sequences lack inference_logprobs: using the on-policy ratio for them",
            )
        old_logp = torch.where(known, lam, logp.detach())
        if known.any() and old_logp[known].mean() > 0.5:
            _warn_once(
                "placeholder-logprobs",
                "inference_logprobs look misaligned (mean > 0.5 at trained positions; 1.0 is the placeholder)",
            )

    log_ratio = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)  # [B, K]
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    per_token = -torch.minimum(ratio * adv, clipped * adv)  # [B, K]

    kl = None
    if kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs (label logprobs under the reference model)")
        ref = ref_logprobs.to(device=logp.device, dtype=logp.dtype)
        delta = torch.where(mask, ref - logp, torch.zeros_like(logp))
        kl = torch.exp(delta) - delta - 1.0  # [B, K], k3 estimator
        per_token = per_token + kl_coef * kl

    maskf = mask.to(logp.dtype)
    n_tokens = maskf.sum(dim=1).clamp(min=1.0)  # [B]
    per_sequence = (per_token * maskf).sum(dim=1) / n_tokens  # [B]
    loss = per_sequence.mean() / gradient_accumulation_steps

    with torch.no_grad():
        n = maskf.sum().clamp(min=1.0)
        adv_seq = (adv * maskf).sum(dim=1) / n_tokens if adv.shape[1] > 1 else adv[:, 0]
        seq_logp = (logp * maskf).sum(dim=1) / n_tokens
        pos, neg = adv_seq > 0, adv_seq < 0
        outside = ((ratio < 1.0 - clip_eps) | (ratio > 1.0 + clip_eps)) & mask
        metrics = {
            "mean_ratio": float((ratio * maskf).sum() / n),
            "clipped_fraction": float(outside.sum() / n),
            "interpretable_loss": float((seq_logp * adv_seq).mean()),
            "pos_logp": float(seq_logp[pos].mean()) if pos.any() else 0.0,
            "neg_logp": float(seq_logp[neg].mean()) if neg.any() else 0.0,
            "pos_count": float(pos.sum()),
            "neg_count": float(neg.sum()),
            "trained_tokens": float(maskf.sum()),
        }
        if known.any():
            diff = (logp - old_logp)[known]
            metrics.update(
                logprob_diff_mean=float(diff.mean()),
                logprob_diff_abs_mean=float(diff.abs().mean()),
                logprob_diff_max=float(diff.abs().max()),
            )
        if kl is not None:
            metrics["kl"] = float((kl * maskf).sum() / n)
    return LossOutput(loss=loss, metrics=metrics, token_logprobs=logp.detach(), mask=mask)
