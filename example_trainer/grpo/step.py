"""One optimizer step per API batch: warmup LR, micro-batch forward/backward, grad clip, optimizer step."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.data import IGNORE_INDEX, MicroBatch, PreparedBatch
from example_trainer.grpo.distributed import (
    DistContext,
    gather_step_sums,
    local_micro_batches,
    no_sync,
    unwrap_model,
)
from example_trainer.grpo.logprobs import packs_efficiently, sequence_logprobs
from example_trainer.grpo.loss import LossOutput, StepTotals, compute_grpo_loss, policy_loss
from example_trainer.grpo.packing import micro_batches

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
    model: Any, ref_model: Any | None, score: Callable[[Any], torch.Tensor]
) -> torch.Tensor:
    """``score(reference)``: label logprobs under the frozen reference, ``ref_model`` or, for PEFT models,
    the adapter-free base."""
    with torch.no_grad():
        if ref_model is not None:
            return score(ref_model)
        if hasattr(model, "disable_adapter"):
            with model.disable_adapter():
                return score(model)
        raise ValueError("kl_coef > 0 needs a reference model")


def use_packing(config: TrainingConfig, model: Any) -> bool:
    """Whether micro-batches run as packed rows: ``--sequence-packing on``, or ``auto`` with an attention
    that runs packed rows as separate sequences (flash-attention; SDPA would pay the packed row's square)."""
    if config.sequence_packing == "auto":
        return packs_efficiently(model)
    return config.sequence_packing == "on"


@dataclass
class SharedPrefixLayout:
    """A micro-batch regrouped so that each distinct prompt runs through the model once.

    Row ``i`` is ``prefix[row_prefix[i]]`` (its tokens before its first trained position) followed by
    ``suffix[i]`` (its tokens from there to its last trained position); ``suffix_labels`` etc. are the
    row's per-position tensors on the suffix columns (``-100`` / 0 / NaN after the row's end).
    """

    prefix_ids: torch.Tensor  #: [U, P] right-padded distinct prefixes
    prefix_mask: torch.Tensor  #: [U, P] 1 on real tokens
    row_prefix: torch.Tensor  #: [B] index of each row's prefix
    suffix_ids: torch.Tensor  #: [B, S]
    suffix_mask: torch.Tensor  #: [B, S]
    suffix_positions: torch.Tensor  #: [B, S] position ids (prefix length + column)
    suffix_labels: torch.Tensor  #: [B, S]
    suffix_advantages: torch.Tensor  #: [B, 1] or [B, S]
    suffix_logprobs: torch.Tensor | None  #: [B, S]
    suffix_teacher: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  #: [B, S, k] x2, [B, S]


#: Share prompts only when at least this many rows share each distinct prefix on average.
MIN_ROWS_PER_PREFIX = 2.0
#: The arguments :func:`shared_prefix_logits` passes to the model's ``forward`` (Hugging Face causal LMs take
#: them all).
SHARED_PREFIX_ARGS = frozenset({"attention_mask", "position_ids", "past_key_values", "logits_to_keep"})


def supports_shared_prefixes(model: Any) -> bool:
    """True when the model's ``forward`` takes every argument :func:`shared_prefix_logits` passes, by name
    or through ``**kwargs`` (as PEFT wrappers pass them on to the model they wrap)."""
    parameters = inspect.signature(unwrap_model(model).forward).parameters
    passes_on = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return passes_on or SHARED_PREFIX_ARGS <= parameters.keys()


def shared_prefix_layout(mb: MicroBatch) -> SharedPrefixLayout | None:
    """The micro-batch as distinct prefixes plus per-row suffixes, or None when that saves nothing
    (fewer than :data:`MIN_ROWS_PER_PREFIX` rows per distinct prefix, or a row with nothing to train).

    GRPO groups are several completions of one prompt: their prompts are identical, so the forward and
    backward passes over them can be done once per group instead of once per row.
    """
    trained = mb.labels != IGNORE_INDEX
    if not bool(trained.any(dim=1).all()):
        return None
    cols = torch.arange(mb.labels.shape[1])
    first = torch.where(trained, cols, mb.labels.shape[1]).min(dim=1).values
    last = torch.where(trained, cols, -1).max(dim=1).values
    if bool((first < 1).any()):
        return None
    keys: dict[tuple[int, ...], int] = {}
    row_prefix = []
    token_rows = mb.tokens.tolist()
    for row, start in zip(token_rows, first.tolist(), strict=True):
        row_prefix.append(keys.setdefault(tuple(row[:start]), len(keys)))
    if len(token_rows) < MIN_ROWS_PER_PREFIX * len(keys):
        return None
    prefixes = list(keys)
    width = max(len(p) for p in prefixes)
    prefix_ids = torch.zeros((len(prefixes), width), dtype=mb.tokens.dtype)
    prefix_mask = torch.zeros((len(prefixes), width), dtype=torch.long)
    for u, prefix in enumerate(prefixes):
        prefix_ids[u, : len(prefix)] = torch.tensor(prefix, dtype=mb.tokens.dtype)
        prefix_mask[u, : len(prefix)] = 1
    lengths = (last - first + 1).tolist()
    span = max(lengths)
    b = len(token_rows)
    # Gather each row's columns first..first+span-1, then blank what lies past the row's own end.
    index = (first.unsqueeze(1) + torch.arange(span).unsqueeze(0)).clamp(max=mb.labels.shape[1] - 1)
    inside = torch.arange(span).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    suffix_ids = torch.where(inside, mb.tokens.gather(1, index), 0)
    suffix_labels = torch.where(inside, mb.labels.gather(1, index), IGNORE_INDEX)
    advantages = mb.advantages
    if advantages.shape[1] != 1:
        advantages = torch.where(inside, advantages.gather(1, index), 0)
    logprobs = None
    if mb.inference_logprobs is not None:
        logprobs = torch.where(inside, mb.inference_logprobs.gather(1, index), float("nan"))
    teacher = None
    if mb.teacher_topk_ids is not None:
        index3 = index.unsqueeze(-1).expand(-1, -1, mb.teacher_topk_ids.shape[-1])
        inside3 = inside.unsqueeze(-1)
        teacher = (
            torch.where(inside3, mb.teacher_topk_ids.gather(1, index3), -1),
            torch.where(inside3, mb.teacher_topk_logprobs.gather(1, index3), float("nan")),
            torch.where(inside, mb.teacher_logprobs.gather(1, index), float("nan")),
        )
    return SharedPrefixLayout(
        prefix_ids=prefix_ids,
        prefix_mask=prefix_mask,
        row_prefix=torch.tensor(row_prefix, dtype=torch.long),
        suffix_ids=suffix_ids,
        suffix_mask=inside.long(),
        suffix_positions=first.unsqueeze(1) + torch.arange(span).unsqueeze(0).expand(b, span),
        suffix_labels=suffix_labels,
        suffix_advantages=advantages,
        suffix_logprobs=logprobs,
        suffix_teacher=teacher,
    )


def shared_prefix_logits(model: Any, layout: SharedPrefixLayout, device: str) -> torch.Tensor:
    """Logits [B, S, V] of every suffix position: the prefixes run once (their key/value cache, with its
    gradient, is copied to their rows), then the suffixes attend to it."""
    prefix_ids = layout.prefix_ids.to(device)
    prefix_mask = layout.prefix_mask.to(device)
    positions = (prefix_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=prefix_ids, attention_mask=prefix_mask, position_ids=positions, use_cache=True,
        logits_to_keep=1,
    )  # fmt: skip
    cache = out.past_key_values
    rows = layout.row_prefix.to(device)
    if hasattr(cache, "batch_select_indices"):
        cache.batch_select_indices(rows)
    else:  # older transformers
        cache.reorder_cache(rows)
    mask = torch.cat([prefix_mask.index_select(0, rows), layout.suffix_mask.to(device)], dim=1)
    return model(
        input_ids=layout.suffix_ids.to(device),
        attention_mask=mask,
        position_ids=layout.suffix_positions.to(device),
        past_key_values=cache,
        use_cache=True,
    ).logits


def _participate(model: Any, device: str) -> None:
    """A zero-weight forward/backward, so a rank with nothing to train still joins gradient sync."""
    tokens = torch.zeros((1, 1), dtype=torch.long, device=device)
    (forward_logits(model, tokens, 1).sum() * 0.0).backward()


def _micro_batch_loss(
    model: Any,
    ref_model: Any | None,
    mb: MicroBatch,
    window: tuple[int, int],
    config: TrainingConfig,
    totals: StepTotals,
    packed: bool,
    device: str,
) -> LossOutput:
    """The loss of one micro-batch from its per-token log-probabilities (:func:`sequence_logprobs`, packed
    or padded, the output head in chunks). ``window`` = ``(first, end)``: the columns from the first to the
    last trained position; the model runs columns ``[0, end)``, the loss sees ``[first, end)``."""
    settings = config.loss_settings
    first, end = window
    tokens, labels = mb.tokens[:, :end], mb.labels[:, :end]  # [B, end]
    forward_topk = settings.distill_kind == "forward" and settings.distill_coef > 0
    topk_ids = mb.teacher_topk_ids if forward_topk else None

    def score(m: Any, extra_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """([B, end] label logprobs, [B, end, k] logprobs of ``extra_ids``) under the model ``m``."""
        return sequence_logprobs(
            m, tokens, labels, mb.temperatures, extra_ids=extra_ids, packed=packed,
            chunk_tokens=config.logprob_chunk_tokens, device=device,
        )  # fmt: skip

    def cols(t: torch.Tensor | None) -> torch.Tensor | None:
        """A per-token tensor's trained columns [B, end - first, ...] on the device."""
        return None if t is None else t[:, first:end].to(device)

    ref_lp = None
    if config.kl_coef > 0:
        ref_lp = cols(_reference_logprobs(unwrap_model(model), ref_model, lambda m: score(m)[0]))
    logp, student_topk = score(
        model, None if topk_ids is None else topk_ids[:, :end]
    )  # [B, end], [B, end, k]
    return policy_loss(
        cols(logp),
        cols(labels) != IGNORE_INDEX,
        mb.advantages.to(device) if mb.advantages.shape[1] == 1 else cols(mb.advantages),
        cols(mb.inference_logprobs),
        settings,
        totals,
        ref_logprobs=ref_lp,
        teacher_logprobs=cols(mb.teacher_logprobs),
        teacher_topk_logprobs=cols(mb.teacher_topk_logprobs) if student_topk is not None else None,
        student_topk_logprobs=cols(student_topk),
    )


def run_training_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: PreparedBatch,
    config: TrainingConfig,
    step: int,
    ref_model: Any | None = None,
    dist: DistContext | None = None,
    share_prefixes: bool | None = None,
) -> dict[str, float]:
    """Train on one API batch and take one optimizer step; returns averaged metrics.

    ``step`` is the 0-based index of this optimizer step (it sets the warmup LR). Each sequence's loss
    counts ``1 / N`` of the batch of ``N`` sequences, so the update is the same whatever the micro-batch
    size. Gradients are clipped to ``config.max_grad_norm`` (1.0 by default).

    With ``dist`` (several ranks; ``model`` wrapped by :func:`~example_trainer.grpo.distributed.wrap_model`),
    ``batch`` is the global batch held by every rank: each rank trains its shard, gradients are averaged
    once per step, and the metrics (loss included) describe the whole batch, as with one process.

    Each micro-batch only runs the columns up to its last trained position, and the LM head only on
    the columns from its first trained position: padding and prompt-only columns cost nothing, and the
    result is the same as on the full padded batch.

    Micro-batches are ``config.micro_batch_size`` sequences, or with ``config.micro_batch_tokens`` as many as fit
    that many tokens (:mod:`example_trainer.grpo.packing`); they run packed, without padding, where
    :func:`use_packing` says so. Log-probabilities come from the output head run a chunk of positions at a
    time (:mod:`example_trainer.grpo.logprobs`): the ``[B, K, V]`` logits never exist at once.

    ``share_prefixes`` (default: on for one process without a KL term, micro-batches of
    ``micro_batch_size`` padded rows): rows that share their tokens up to their first trained position (the completions of one
    prompt) run that prefix through the model once (see :func:`shared_prefix_layout`); the loss and
    gradients are those of the row-by-row computation.
    """
    ctx = dist or DistContext(device=config.device)
    packed = use_packing(config, model)
    if share_prefixes is None:
        share_prefixes = _shares_prefixes_by_default(config, model, ctx, packed)
    lr = lr_at_step(step, config.lr, config.warmup_steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    micro = _step_micro_batches(batch, config, ctx, packed)
    totals = StepTotals(
        sequences=batch.num_sequences,
        tokens=batch.num_trained_tokens,
        longest=batch.longest_completion,
        completion_budget=config.max_completion_tokens,
        scale=ctx.world_size,  # gradients are averaged over the ranks
    )
    sums = StepSums()
    start = time.perf_counter()
    for index, mb in enumerate(micro):
        window = trained_window(mb.labels) if mb is not None else None
        with no_sync(model, last=index == len(micro) - 1):
            if mb is None or window is None:  # nothing to learn from this micro-batch
                if ctx.enabled:
                    _participate(model, ctx.device)
                continue
            layout = shared_prefix_layout(mb) if share_prefixes else None
            if layout is not None:
                out = _shared_prefix_loss(model, mb, layout, config, totals, ctx.device)
            else:
                out = _micro_batch_loss(model, ref_model, mb, window, config, totals, packed, ctx.device)
            out.loss.backward()
        sums.add(out)
        del out
    grad_norm = _optimizer_step(optimizer, config, ctx.device)
    sums.sums, sums.computed, sums.total_loss = gather_step_sums(
        ctx, sums.sums, sums.computed, sums.total_loss
    )
    return sums.metrics(batch, lr, grad_norm, time.perf_counter() - start)


def _shares_prefixes_by_default(config: TrainingConfig, model: Any, ctx: DistContext, packed: bool) -> bool:
    """Prompt sharing is on for one process without a KL term and with padded micro-batches of
    ``micro_batch_size`` rows, where the model takes the arguments it needs."""
    return (
        not ctx.enabled
        and config.kl_coef == 0
        and config.micro_batch_tokens is None
        and not packed
        and supports_shared_prefixes(model)
    )


def _step_micro_batches(
    batch: PreparedBatch, config: TrainingConfig, ctx: DistContext, packed: bool
) -> list[MicroBatch | None]:
    """This rank's micro-batches of ``batch`` (None: a rank's filler with nothing to train)."""
    budget = config.micro_batch_tokens
    if ctx.enabled:
        return local_micro_batches(batch, ctx, config.micro_batch_size, budget, packed)
    if budget is not None or packed:
        return list(micro_batches(batch, config.micro_batch_size, budget, packed))
    return list(batch.micro_batches)


def _shared_prefix_loss(
    model: Any,
    mb: MicroBatch,
    layout: SharedPrefixLayout,
    config: TrainingConfig,
    totals: StepTotals,
    device: str,
) -> LossOutput:
    """The loss of a micro-batch run as distinct prompts plus per-row suffixes (:func:`shared_prefix_logits`)."""
    logits = shared_prefix_logits(model, layout, device)  # [B, S, V]
    teacher = layout.suffix_teacher

    def on_device(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(device)

    return compute_grpo_loss(
        logits,
        layout.suffix_labels.to(device),
        layout.suffix_advantages.to(device),
        mb.temperatures.to(device),
        on_device(layout.suffix_logprobs),
        settings=config.loss_settings,
        totals=totals,
        teacher_topk_ids=None if teacher is None else teacher[0].to(device),
        teacher_topk_logprobs=None if teacher is None else teacher[1].to(device),
        teacher_logprobs=None if teacher is None else teacher[2].to(device),
    )


def _optimizer_step(optimizer: torch.optim.Optimizer, config: TrainingConfig, device: str) -> float:
    """Clip the gradients to ``max_grad_norm``, step, clear them; returns the norm before clipping."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return float(grad_norm)


@dataclass
class StepSums:
    """The micro-batches' metrics summed over a step (``*_max`` metrics: their maximum)."""

    sums: dict[str, float] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)
    total_loss: float = 0.0
    computed: int = 0  #: micro-batches that trained something

    def add(self, out: LossOutput) -> None:
        self.computed += 1
        self.total_loss += float(out.loss.detach())
        for key, value in out.metrics.items():
            if key.endswith("_max"):
                self.maxima[key] = max(self.maxima.get(key, value), value)
            else:
                self.sums[key] = self.sums.get(key, 0.0) + value

    def metrics(self, batch: PreparedBatch, lr: float, grad_norm: float, elapsed: float) -> dict[str, float]:
        """The step's metrics: per-micro-batch means, counts summed, maxima, and the step's own figures."""
        averaged = max(self.computed, 1)
        counted = {k for k in self.sums if k.endswith("_count") or k == "trained_tokens"}
        metrics = {k: v / averaged for k, v in self.sums.items() if k not in counted}
        metrics.update({k: self.sums[k] for k in counted})
        metrics.update(self.maxima)  # this rank's micro-batches (rank 0 logs)
        metrics.update(
            loss=self.total_loss,
            lr=lr,
            grad_norm=grad_norm,
            step_time_s=elapsed,
            tokens_per_s=batch.num_tokens / elapsed if elapsed > 0 else 0.0,
            kept_reward_mean=batch.mean_score,
            num_sequences=float(batch.num_sequences),
            num_tokens=float(batch.num_tokens),
        )
        return metrics
