r"""The policy losses of the trainer, in one module: the GRPO family, truncated importance sampling and
on-policy distillation.

Shapes: ``B`` sequences, ``K`` positions, ``V`` vocabulary entries, ``k`` teacher top-k entries per
position. Every loss is a function of per-token tensors (:func:`policy_loss`), whatever produced them;
:func:`compute_grpo_loss` is the entry point from logits.

Notation, used by every docstring below: ``l_bt`` the current policy's log-probability of token ``t`` of
sequence ``b`` (temperature-scaled logits), ``lam_bt`` the rollout policy's (the inference engine's
``inference_logprobs``), ``m_bt`` the mask of trained tokens, ``A_bt`` the advantage (per sequence or
per token), ``r_bt = exp(l_bt - lam_bt)`` the token importance ratio, ``eps_lo``/``eps_hi`` the clip
range (``clip_eps_low``/``clip_eps_high``), ``N`` the sequences and ``T = sum m`` the trained tokens of
the whole optimizer step (every micro-batch, every rank), ``|o_b| = sum_t m_bt``.

=============  ======================================================================================
``grpo``       (Shao et al. 2024) ``L = 1/N sum_b 1/|o_b| sum_t -min(r A, clip(r, 1-eps_lo, 1+eps_hi) A)``
``dr_grpo``    (Liu et al. 2025, "Dr. GRPO") the same clipped token objective summed over tokens and
               divided by a constant ``C`` (``--max-completion-tokens``, else the step's longest
               completion) instead of each sequence's length: ``L = 1/(N C) sum_bt m (...)``; the
               advantage is not divided by the group's standard deviation.
``dapo``       (Yu et al. 2025) token-level mean over the step, ``L = 1/T sum_bt m (...)``, with the
               asymmetric "clip-higher" range (``eps_hi > eps_lo``, DAPO uses 0.2 / 0.28) and the
               overlong penalty on the reward (:func:`example_trainer.grpo.advantages.overlong_penalty`).
``gspo``       (Zheng et al. 2025) one importance ratio per sequence, the geometric mean of its token
               ratios ``s_b = exp(1/|o_b| sum_t m (l - lam))``; ``L = 1/N sum_b -min(s A, clip(s) A)``
               (GSPO's ranges are small: 3e-4 / 4e-4).
``cispo``      (MiniMax-M1, 2025) the importance weight is clipped and detached, the gradient flows
               through every token's log-probability: ``L = 1/T sum_bt -m sg(clip(r, 1-eps_lo,
               1+eps_hi)) A l``.
=============  ======================================================================================

Terms added to any of them (same token weights as the loss type; ``gspo`` uses ``grpo``'s):

* KL to a frozen reference (``kl_coef`` = beta): ``beta * (exp(rho - l) - (rho - l) - 1)`` (k3).
* Truncated importance sampling (``tis_cap`` = C, Yao et al. 2025, as in verl and prime-rl): the
  ratio is taken against the trainer's own log-probabilities (one optimizer step per batch: the
  "old" policy is the current one, ``r = exp(l - sg(l)) = 1``), and each token's loss is multiplied by
  ``w = min(exp(sg(l) - lam), C)``, which corrects for the engine computing slightly different
  probabilities than the trainer for the same weights (``gspo``: each sequence's loss by the mean of its
  tokens' weights). Without a cap the ratio is taken against the inference engine's log-probabilities.
* Distillation (``distill_coef`` = gamma), where the batch carries a teacher's log-probabilities:
  reverse KL on the student's own tokens, ``gamma * sg(l - tau) * (1 + l - sg(l))`` with ``tau`` the
  teacher's log-probability of the sampled token: its value is the k1 estimate ``l - tau`` of
  ``KL(pi || teacher)`` and its gradient ``(l - tau) grad l`` that of the reverse KL estimated on the
  sampled tokens (the policy gradient with per-token reward ``tau - l``, as on-policy distillation does); or, ``distill_kind = "forward"``, the forward KL
  over the teacher's top-k renormalised, ``gamma * sum_j q_j (log q_j - s_j)`` with ``q`` the
  teacher's top-k distribution and ``s_j`` the student's log-probability of entry ``j``. Positions
  without teacher data add nothing. ``rl_coef = 0`` leaves distillation alone (pure distillation).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from example_trainer.grpo.data import IGNORE_INDEX
from example_trainer.grpo.reporting import WarnOnce

logger = logging.getLogger(__name__)

_warn_once = WarnOnce(logger)
#: The keys warned about so far (clear it to warn again).
_WARNED = _warn_once.seen

LossType = Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"]
DistillKind = Literal["reverse", "forward"]
#: Loss types whose token weights are ``1 / T`` (token-level mean over the whole step).
TOKEN_MEAN_LOSSES = frozenset({"dapo", "cispo"})


@dataclass(frozen=True)
class LossSettings:
    """What :func:`policy_loss` computes (the trainer's ``--loss-type`` etc.)."""

    loss_type: LossType = "grpo"
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    kl_coef: float = 0.0
    tis_cap: float | None = None
    rl_coef: float = 1.0
    distill_coef: float = 0.0
    distill_kind: DistillKind = "reverse"


@dataclass(frozen=True)
class StepTotals:
    """Totals of the whole optimizer step, which every micro-batch's loss is divided by.

    ``sequences`` = N, ``tokens`` = T (trained tokens), ``completion_budget`` = Dr. GRPO's constant C
    (None: the step's longest completion, ``longest``), ``scale`` multiplies the loss (the number of
    data-parallel ranks, whose gradients are averaged).
    """

    sequences: float
    tokens: float
    longest: float = 1.0
    completion_budget: float | None = None
    scale: float = 1.0


@dataclass
class LossOutput:
    """The differentiable loss of one micro-batch and detached statistics about it."""

    loss: torch.Tensor  #: scalar; the micro-batches' losses sum to the step's loss
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
    logits = _scaled(logits, temperatures)
    b, k, v = logits.shape
    nll = F.cross_entropy(
        logits.reshape(b * k, v), labels.reshape(b * k), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return -nll.view(b, k)


def topk_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperatures: torch.Tensor | None) -> torch.Tensor:
    """Log-probabilities [B, K, k] of the token ids ``ids`` [B, K, k] (entries < 0: padding, giving 0)
    under temperature-scaled ``logits`` [B, K, V]: what the forward top-k KL compares with the teacher."""
    logp = torch.log_softmax(_scaled(logits, temperatures), dim=-1)
    gathered = logp.gather(-1, ids.clamp(min=0).to(logp.device))
    return torch.where(ids.to(logp.device) >= 0, gathered, torch.zeros_like(gathered))


def _scaled(logits: torch.Tensor, temperatures: torch.Tensor | None) -> torch.Tensor:
    logits = logits.float()
    if temperatures is None:
        return logits
    t = temperatures.to(device=logits.device, dtype=logits.dtype)
    return logits / torch.where(t > 0, t, torch.ones_like(t))


def token_weights(mask: torch.Tensor, settings: LossSettings, totals: StepTotals) -> torch.Tensor:
    """[B, K] weight of each token's loss in the step's loss, by loss type (see the module docstring):
    ``1/(N |o_b|)`` (grpo, gspo), ``1/(N C)`` (dr_grpo), ``1/T`` (dapo, cispo); 0 where not trained."""
    maskf = mask.float()
    if settings.loss_type in TOKEN_MEAN_LOSSES:
        return maskf / max(totals.tokens, 1.0)
    if settings.loss_type == "dr_grpo":
        budget = totals.completion_budget or totals.longest
        return maskf / (max(totals.sequences, 1.0) * max(budget, 1.0))
    lengths = maskf.sum(dim=1, keepdim=True).clamp(min=1.0)
    return maskf / lengths / max(totals.sequences, 1.0)


def policy_loss(
    logp: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    inference_logprobs: torch.Tensor | None,
    settings: LossSettings,
    totals: StepTotals,
    ref_logprobs: torch.Tensor | None = None,
    teacher_logprobs: torch.Tensor | None = None,
    teacher_topk_logprobs: torch.Tensor | None = None,
    student_topk_logprobs: torch.Tensor | None = None,
) -> LossOutput:
    r"""The loss of one micro-batch, from per-token tensors (every formula in the module docstring).

    ``L = rl_coef * PG + kl_coef * sum_bt w_bt k3_bt + distill_coef * sum_bt w_bt D_bt``, times
    ``totals.scale``, with ``PG`` the loss type's clipped objective (:func:`_policy_gradient_term`) and
    ``w`` the token weights (:func:`token_weights`).

    Inputs:
        logp: [B, K] current-policy log-probability of each trained token (differentiable).
        mask: [B, K] bool, trained positions.
        advantages: [B, 1] per sequence or [B, K] per token.
        inference_logprobs: [B, K] the rollout policy's log-probabilities, ``NaN`` where unknown; None
            when unknown for every sequence. Where unknown, ``lam = sg(l)`` (on-policy ratio ``r = 1``,
            gradient ``grad l``), with one warning.
        ref_logprobs: [B, K] under the frozen reference (needed when ``kl_coef > 0``).
        teacher_logprobs: [B, K] the teacher's log-probability of each sampled token, ``NaN`` where the
            teacher did not report it (reverse-KL distillation).
        teacher_topk_logprobs: [B, K, k] the teacher's top-k log-probabilities, ``NaN`` padding;
            ``student_topk_logprobs`` [B, K, k] the student's for the same ids (forward-KL distillation).

    Returns the loss weighted by :func:`token_weights` and multiplied by ``totals.scale``: summed over
    the micro-batches of a step it is the step's loss.
    """
    s = settings
    adv = advantages.to(device=logp.device, dtype=logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    lam, known = _rollout_logprobs(logp, mask, inference_logprobs)
    mismatch = torch.where(known, logp.detach() - lam, torch.zeros_like(logp))  # [B, K] log(pi / pi_infer)

    if s.tis_cap is not None:
        old = logp.detach()  # one optimizer step per batch: the old policy is the current one
        tis = torch.where(known, torch.exp(mismatch).clamp(max=s.tis_cap), torch.ones_like(logp))
    else:
        old = lam
        tis = torch.ones_like(logp)
    log_ratio = torch.where(mask, logp - old, torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)  # [B, K]
    weights = token_weights(mask, s, totals)  # [B, K]
    rl, outside = _policy_gradient_term(logp, mask, adv, log_ratio, ratio, tis, weights, s, totals)
    loss = s.rl_coef * rl

    kl = None
    if s.kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs (label logprobs under the reference model)")
        delta = torch.where(mask, ref_logprobs.to(logp) - logp, torch.zeros_like(logp))
        kl = torch.exp(delta) - delta - 1.0  # [B, K], k3 estimator
        loss = loss + s.kl_coef * (_term_weights(weights, mask, s, totals) * kl).sum()

    distill = _distill_term(logp, mask, s, teacher_logprobs, teacher_topk_logprobs, student_topk_logprobs)
    if distill is not None and s.distill_coef > 0:
        per_token_d, covered, _ = distill
        w = _term_weights(weights, mask, s, totals) * covered
        if s.distill_kind == "reverse":
            w = w * tis
        loss = loss + s.distill_coef * (w * per_token_d).sum()
    loss = loss * totals.scale

    with torch.no_grad():
        metrics = _metrics(logp, mask, adv, ratio, outside, known, mismatch, s, kl, distill)
    return LossOutput(loss=loss, metrics=metrics, token_logprobs=logp.detach(), mask=mask)


def _policy_gradient_term(
    logp: torch.Tensor,
    mask: torch.Tensor,
    adv: torch.Tensor,
    log_ratio: torch.Tensor,
    ratio: torch.Tensor,
    tis: torch.Tensor,
    weights: torch.Tensor,
    s: LossSettings,
    totals: StepTotals,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rl, outside)``: the clipped policy-gradient loss of the loss type (a scalar, already weighted) and
    the [B, K] mask of trained tokens whose ratio lies outside ``[1 - eps_lo, 1 + eps_hi]``.

    Per token (grpo, dr_grpo, dapo): ``w * tis * -min(r A, clip(r) A)``; cispo: ``w * tis * -sg(clip(r)) A l``;
    gspo: per sequence, ``-min(s A, clip(s) A) * mean_t(tis)`` with ``s_b = exp(mean_t log r_bt)``, over ``N``.
    """
    lo, hi = 1.0 - s.clip_eps_low, 1.0 + s.clip_eps_high
    if s.loss_type == "gspo":
        maskf = mask.to(logp.dtype)
        n_tok = maskf.sum(dim=1).clamp(min=1.0)  # [B]
        seq_ratio = torch.exp((log_ratio * maskf).sum(dim=1) / n_tok)  # [B]
        seq_adv = (adv * maskf).sum(dim=1) / n_tok if adv.shape[1] > 1 else adv[:, 0]  # [B]
        seq_tis = (tis * maskf).sum(dim=1) / n_tok  # [B]
        per_seq = -torch.minimum(seq_ratio * seq_adv, seq_ratio.clamp(lo, hi) * seq_adv) * seq_tis
        has = (maskf.sum(dim=1) > 0).to(logp.dtype)
        rl = (per_seq * has).sum() / max(totals.sequences, 1.0)
        return rl, ((seq_ratio < lo) | (seq_ratio > hi)).unsqueeze(1) & mask
    if s.loss_type == "cispo":
        per_token = -ratio.clamp(lo, hi).detach() * adv * logp
    else:
        per_token = -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
    rl = (weights * tis * per_token).sum()
    return rl, ((ratio < lo) | (ratio > hi)) & mask


def _term_weights(weights: torch.Tensor, mask: torch.Tensor, s: LossSettings, totals: StepTotals):
    """Token weights of the KL and distillation terms: the loss type's (grpo's for gspo)."""
    if s.loss_type == "gspo":
        return token_weights(mask, LossSettings(loss_type="grpo"), totals)
    return weights


def _rollout_logprobs(
    logp: torch.Tensor, mask: torch.Tensor, inference_logprobs: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lam, known)``: the rollout logprobs [B, K] with ``sg(l)`` where unknown, and where they are known."""
    if inference_logprobs is None:
        _warn_once(
            "no-logprobs",
            "batch has no inference_logprobs: using the on-policy ratio (r = 1); importance sampling is off",
        )
        return logp.detach(), torch.zeros_like(mask)
    lam = inference_logprobs.to(device=logp.device, dtype=logp.dtype)
    known = ~torch.isnan(lam) & mask
    if (~known & mask).any():
        _warn_once(
            "partial-logprobs", "some sequences lack inference_logprobs: using the on-policy ratio for them"
        )
    old = torch.where(known, lam, logp.detach())
    if known.any() and old[known].mean() > 0.5:
        _warn_once(
            "placeholder-logprobs",
            "inference_logprobs look misaligned (mean > 0.5 at trained positions; 1.0 is the placeholder)",
        )
    return old, known


def _distill_term(
    logp: torch.Tensor,
    mask: torch.Tensor,
    s: LossSettings,
    teacher_logprobs: torch.Tensor | None,
    teacher_topk: torch.Tensor | None,
    student_topk: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """``(loss [B, K], covered [B, K] float, kl [B, K] detached)`` of the distillation term, or None
    without teacher data.

    reverse: loss ``sg(l - tau) * (1 + l - sg(l))`` (value ``l - tau``, the k1 estimate; gradient the
    reverse KL's), kl ``l - tau``. forward: loss and kl ``sum_j q_j (log q_j - s_j)`` over the teacher's top-k, ``q``
    renormalised.
    """
    if s.distill_kind == "reverse":
        if teacher_logprobs is None:
            return None
        tau = teacher_logprobs.to(device=logp.device, dtype=logp.dtype)
        covered = ~torch.isnan(tau) & mask
        gap = torch.where(covered, logp.detach() - tau, torch.zeros_like(logp))
        return gap * (1.0 + logp - logp.detach()), covered.to(logp.dtype), gap
    if teacher_topk is None or student_topk is None:
        return None
    t = teacher_topk.to(device=logp.device, dtype=logp.dtype)
    valid = ~torch.isnan(t)  # [B, K, k]
    q_log = torch.log_softmax(torch.where(valid, t, torch.full_like(t, -torch.inf)), dim=-1)
    q_log = torch.where(valid, q_log, torch.zeros_like(q_log))
    kl = (q_log.exp() * (q_log - student_topk.to(logp)) * valid).sum(dim=-1)  # [B, K]
    covered = valid.any(dim=-1) & mask
    kl = torch.where(covered, kl, torch.zeros_like(kl))
    return kl, covered.to(logp.dtype), kl.detach()


def _metrics(
    logp: torch.Tensor,
    mask: torch.Tensor,
    adv: torch.Tensor,
    ratio: torch.Tensor,
    outside: torch.Tensor,
    known: torch.Tensor,
    mismatch: torch.Tensor,
    s: LossSettings,
    kl: torch.Tensor | None,
    distill: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
) -> dict[str, float]:
    """Detached statistics of one micro-batch. Keys ending in ``_max`` are maxima (the trainer takes the
    maximum over micro-batches), ``_count`` and ``trained_tokens`` are sums, the rest means."""
    maskf = mask.to(logp.dtype)
    n = maskf.sum().clamp(min=1.0)
    n_tokens = maskf.sum(dim=1).clamp(min=1.0)
    adv_seq = (adv * maskf).sum(dim=1) / n_tokens if adv.shape[1] > 1 else adv[:, 0]
    seq_logp = (logp * maskf).sum(dim=1) / n_tokens
    pos, neg = adv_seq > 0, adv_seq < 0
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
        diff = mismatch[known]
        metrics.update(
            logprob_diff_mean=float(diff.mean()),
            logprob_diff_abs_mean=float(diff.abs().mean()),
            logprob_diff_max=float(diff.abs().max()),
            # trainer vs inference engine: log(pi_trainer / pi_infer) over tokens with known rollout logprobs
            mismatch_log_ratio_mean=float(diff.mean()),
            mismatch_log_ratio_max=float(diff.abs().max()),
        )
        if s.tis_cap is not None:
            metrics["tis_truncated_fraction"] = float((diff.exp() > s.tis_cap).float().mean())
    if kl is not None:
        metrics["kl"] = float((kl * maskf).sum() / n)
    if distill is not None:
        _, covered, value = distill
        m = covered.sum()
        if m > 0:
            metrics["distill_kl"] = float((value * covered).sum() / m)
            metrics["distill_coverage"] = float(m / n)
    return metrics


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
    settings: LossSettings | None = None,
    totals: StepTotals | None = None,
    teacher_logprobs: torch.Tensor | None = None,
    teacher_topk_ids: torch.Tensor | None = None,
    teacher_topk_logprobs: torch.Tensor | None = None,
) -> LossOutput:
    r"""The loss of one micro-batch from its logits: :func:`policy_loss` on :func:`token_logprobs`.

    Inputs:
        logits: [B, K, V] current policy logits (any float dtype; computed in float32).
        labels: [B, K] target token ids, -100 where not trained.
        advantages: [B, 1] per sequence, or [B, K] per token (see :mod:`example_trainer.grpo.advantages`).
        temperatures: [B, 1, 1] sampling temperature of each sequence (None = 1).
        inference_logprobs: [B, K] rollout log-probabilities (``NaN`` where unknown) or None.
        teacher_logprobs: [B, K] teacher log-probability of each label (``NaN``: unknown).
        teacher_topk_ids / teacher_topk_logprobs: [B, K, k] the teacher's top-k (ids < 0 / ``NaN``:
            padding), for the forward-KL distillation term.

    Without ``settings`` this is the ``grpo`` loss with standard PPO clipping (``grpo``,
    ``clip_eps`` both ways, ``kl_coef``); without ``totals`` the step is this micro-batch repeated
    ``gradient_accumulation_steps`` times (``G`` may be fractional), so the ``grpo`` loss is

    .. math::

        \mathrm{loss} = \frac{1}{G}\cdot\frac{1}{B}\sum_b \frac{1}{|o_b|}\sum_t m_{bt}
            \Big(-\min\big(r_{bt} A_{bt},\ \mathrm{clip}(r_{bt}, 1-\epsilon, 1+\epsilon) A_{bt}\big)
            + \beta\,\mathrm{k3}_{bt}\Big)

    Standard PPO clipping for both signs of the advantage: for ``A < 0`` the gradient vanishes once
    ``r < 1 - eps`` and is kept for ``r > 1 + eps``; ``-max(r A, clip(r) A)`` for ``A < 0`` would zero
    the gradient exactly where the policy has drifted towards a bad token.
    """
    if settings is None:
        settings = LossSettings(clip_eps_low=clip_eps, clip_eps_high=clip_eps, kl_coef=kl_coef)
    mask = labels != IGNORE_INDEX  # [B, K]
    logp = token_logprobs(logits, labels, temperatures)  # [B, K]
    if totals is None:
        b = labels.shape[0]
        totals = StepTotals(
            sequences=b * gradient_accumulation_steps,
            tokens=float(mask.sum()) * gradient_accumulation_steps,
            longest=float(mask.sum(dim=1).max()) if b else 1.0,
        )
    student_topk = None
    if settings.distill_kind == "forward" and teacher_topk_ids is not None and settings.distill_coef > 0:
        student_topk = topk_logprobs(logits, teacher_topk_ids, temperatures)  # [B, K, k]
    return policy_loss(
        logp,
        mask,
        advantages,
        inference_logprobs,
        settings,
        totals,
        ref_logprobs=ref_logprobs,
        teacher_logprobs=teacher_logprobs,
        teacher_topk_logprobs=teacher_topk_logprobs,
        student_topk_logprobs=student_topk,
    )
