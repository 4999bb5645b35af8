"""Turn one API batch (a list of scored groups) into padded micro-batches of tensors.

The layout (also served as per-micro-batch lists by ``pad_data_to_good_offset``):

* ``L`` = the longest sequence of the whole API batch; ``K = 64 * ceil((L - 1) / 64)``. Every sequence is
  right-padded to ``K + 1`` tokens (token 0, mask -100); the model input is ``tokens[:-1]`` and the labels
  are ``masks[1:]`` (so ``masks`` must carry the target token id at trained positions, -100 elsewhere).
* Sequence advantages are the group's scores normalised per group with the population standard deviation,
  ``(s - mean) / max(std, 1e-8)``; a one-sequence group keeps its raw score. ``overrides[i]`` with a truthy
  ``set_advantage_to_zero`` zeroes sequence ``i``.
* Temperature per sequence: ``overrides[i]["temperature"]``, else ``generation_params["temperature"]``,
  else ``group_overrides["temperature"]``, else 1.0.
* Rollout log-probabilities (``inference_logprobs``, aligned with ``tokens``) are shifted like the labels.
* Sequences are flattened in batch order and cut into micro-batches of ``micro_batch_size`` (the trainer regroups
  them by a token budget with ``--micro-batch-tokens``: :mod:`example_trainer.grpo.packing`).

Missing or odd per-token data:

* ``inference_logprobs: null`` (what the API stores when an env omitted them) is accepted. Unknown
  log-probabilities are ``NaN``; the loss then uses the on-policy ratio for those sequences. A row whose
  length differs from its tokens' is treated as unknown (it cannot be aligned).
* Token-level ``advantages`` sent by an environment are used (shifted like the labels); a row whose length differs from its tokens' falls back to the sequence advantage.
* The input is never mutated.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from atroposlib.group import MASKED, CheckOptions, check_group
from example_trainer.grpo.advantages import AdvantageType, group_advantages, overlong_penalty
from example_trainer.grpo.reporting import WarnOnce
from example_trainer.grpo.teacher_data import label_logprobs, sequence_teacher_rows, teacher_tensors

logger = logging.getLogger(__name__)

#: Pad length granularity (tokens).
PAD_MULTIPLE = 64
#: Floor of the per-group standard deviation in score normalisation.
STD_EPS = 1e-8
#: Label value of positions that are not trained.
IGNORE_INDEX = MASKED
#: The scored-group contract as the API serves it: values typed, optional fields of any length.
_SERVED = CheckOptions(optional_counts=False, values_typed=True)

_warn_once = WarnOnce(logger)
#: The keys warned about so far (clear it to warn again).
_WARNED = _warn_once.seen


@dataclass
class MicroBatch:
    """Tensors of one micro-batch (``B`` sequences, ``K`` positions)."""

    tokens: torch.Tensor  #: [B, K] int64 model input
    labels: torch.Tensor  #: [B, K] int64 target ids, -100 where not trained
    advantages: torch.Tensor  #: [B, 1] float64 per sequence, or [B, K] when token-level advantages exist
    temperatures: torch.Tensor  #: [B, 1, 1] float32 sampling temperature of each sequence
    #: [B, K] float32 rollout logprobs, NaN where unknown; None when unknown for every sequence
    inference_logprobs: torch.Tensor | None
    #: [B, K, k] the teacher's top-k ids (-1 padding) and log-probabilities (NaN padding), and [B, K] its
    #: log-probability of each label (NaN: not reported); None when no sequence carries teacher data
    teacher_topk_ids: torch.Tensor | None = None
    teacher_topk_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None

    @property
    def num_sequences(self) -> int:
        return int(self.tokens.shape[0])


@dataclass(frozen=True)
class ScoreShaping:
    """How scores become advantages: the estimator (``--advantage``), whether the group's standard
    deviation divides them, and DAPO's overlong penalty ``(max_tokens, buffer)`` (None: off)."""

    advantage: AdvantageType = "grpo"
    scale_by_std: bool = True
    overlong: tuple[int, int] | None = None


@dataclass
class PreparedBatch:
    """One API batch, ready for one optimizer step."""

    micro_batches: list[MicroBatch]
    num_sequences: int
    num_tokens: int  #: real (unpadded) tokens over all sequences
    num_trained_tokens: int  #: positions with a label
    mean_score: float  #: mean raw score over all sequences
    has_inference_logprobs: bool  #: at least one sequence carried usable rollout logprobs
    seq_len: int  #: K
    longest_completion: int = 1  #: the most trained tokens of one sequence
    has_teacher: bool = False  #: at least one sequence carried teacher logprobs


def padded_length(max_len: int) -> int:
    """``K = 64 * ceil((L - 1) / 64)``, the number of model positions for a longest sequence of ``L``."""
    return max(PAD_MULTIPLE, PAD_MULTIPLE * math.ceil((max_len - 1) / PAD_MULTIPLE))


def normalize_scores(scores: Sequence[float]) -> np.ndarray:
    """Per-group advantages: ``(s - mean) / max(std_pop, 1e-8)``; a single score is returned unchanged."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size <= 1:
        return s.copy()
    return (s - s.mean()) / max(float(s.std()), STD_EPS)


def _override(group: Mapping[str, Any], i: int) -> Mapping[str, Any]:
    overrides = group.get("overrides")
    if isinstance(overrides, list) and i < len(overrides) and isinstance(overrides[i], Mapping):
        return overrides[i]
    return {}


def sequence_temperature(group: Mapping[str, Any], i: int) -> float:
    """Temperature of sequence ``i``: per-sequence override > generation_params > group_overrides > 1.0."""
    for source in (_override(group, i), group.get("generation_params"), group.get("group_overrides")):
        if isinstance(source, Mapping) and source.get("temperature") is not None:
            return float(source["temperature"])
    return 1.0


def _row(values: Any, i: int, expected_len: int, what: str) -> list[float] | None:
    """Row ``i`` of an optional per-token list, or None when absent or not aligned with the tokens."""
    if not isinstance(values, list) or i >= len(values) or values[i] is None:
        return None
    row = values[i]
    if len(row) != expected_len:
        _warn_once(
            f"len-{what}",
            f"{what} row has {len(row)} entries for {expected_len} tokens; ignoring it (it cannot be aligned)",
        )
        return None
    return row


def group_policy_step(group: Mapping[str, Any]) -> int | None:
    """The trainer step of the policy that generated ``group`` (``policy_step`` in group_overrides or
    generation_params), or None when the environment did not record it."""
    for source in (group.get("group_overrides"), group.get("generation_params")):
        if isinstance(source, Mapping) and source.get("policy_step") is not None:
            return int(source["policy_step"])
    return None


def split_stale_groups(
    groups: Sequence[Mapping[str, Any]], current_step: int, max_staleness: int | None
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Split into (fresh, stale): stale groups were generated more than ``max_staleness`` steps before
    ``current_step``. Groups without a recorded policy step are always fresh."""
    if max_staleness is None:
        return list(groups), []
    fresh, stale = [], []
    for group in groups:
        step = group_policy_step(group)
        (stale if step is not None and current_step - step > max_staleness else fresh).append(group)
    return fresh, stale


def staleness_histogram(groups: Sequence[Mapping[str, Any]], current_step: int) -> dict[int, int]:
    """How many of ``groups`` were generated ``k`` steps before ``current_step``, per ``k`` (groups without
    a recorded policy step are left out)."""
    histogram: dict[int, int] = {}
    for group in groups:
        step = group_policy_step(group)
        if step is not None:
            histogram[current_step - step] = histogram.get(current_step - step, 0) + 1
    return dict(sorted(histogram.items()))


def prepare_batch(
    groups: Sequence[Mapping[str, Any]],
    micro_batch_size: int,
    extract_inference_logprobs: bool = True,
    shaping: ScoreShaping | None = None,
) -> PreparedBatch:
    """Pad, normalise and micro-batch one API batch (see the module docstring for the exact rules).

    ``micro_batch_size`` is the micro-batch size in sequences. Raises ``ValueError`` for an empty batch or
    a group that breaks the scored-group contract (:func:`atroposlib.group.check_group`: tokens,
    masks and scores disagree in count or length, an empty sequence, ...). ``shaping`` (default: the
    GRPO advantage of the module docstring) selects the advantage estimator and the overlong penalty
    (:mod:`example_trainer.grpo.advantages`); teacher logprobs are read by :mod:`example_trainer.grpo.teacher_data`.
    """
    shaping = shaping or ScoreShaping()
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    rows = _BatchRows()
    for g, group in enumerate(groups):
        rows.add_group(g, group, shaping, extract_inference_logprobs)
    if not rows.tokens:
        raise ValueError("the batch holds no sequences")
    k = padded_length(max(len(r) for r in rows.tokens))
    padded = rows.padded(k)
    labels = padded["labels"]
    micro = [
        _micro_batch(padded, slice(start, min(start + micro_batch_size, padded["n"])))
        for start in range(0, padded["n"], micro_batch_size)
    ]
    return PreparedBatch(
        micro_batches=micro,
        num_sequences=padded["n"],
        num_tokens=sum(len(r) for r in rows.tokens),
        num_trained_tokens=int((labels != IGNORE_INDEX).sum()),
        mean_score=float(np.mean(rows.scores)),
        has_inference_logprobs=bool(padded["has_lp"].any()),
        seq_len=k,
        longest_completion=max(1, int((labels != IGNORE_INDEX).sum(dim=1).max())),
        has_teacher=bool(padded["has_teacher"].any()),
    )


@dataclass
class _BatchRows:
    """One API batch flattened into per-sequence rows (unpadded), in batch order."""

    tokens: list[list[int]] = field(default_factory=list)
    masks: list[list[int]] = field(default_factory=list)
    seq_adv: list[float] = field(default_factory=list)  #: per-sequence advantage
    tok_adv: list[list[float] | None] = field(default_factory=list)  #: per-token advantages, if given
    temps: list[float] = field(default_factory=list)
    logprobs: list[list[float] | None] = field(default_factory=list)  #: rollout logprobs, if given
    scores: list[float] = field(default_factory=list)
    teacher: list[tuple[list, list] | None] = field(default_factory=list)

    def add_group(
        self, g: int, group: Mapping[str, Any], shaping: ScoreShaping, extract_inference_logprobs: bool
    ) -> None:
        """Check group ``g`` against the scored-group contract and append its sequences."""
        problems = check_group(group, _SERVED)
        if problems:
            raise ValueError(f"group {g}: {problems[0]}")
        tokens, masks, group_scores = group["tokens"], group["masks"], group["scores"]
        shaped = [float(x) for x in group_scores]
        if shaping.overlong is not None:
            trained = [sum(1 for t in m if t != IGNORE_INDEX) for m in masks]
            shaped = [
                x + overlong_penalty(n, *shaping.overlong) for x, n in zip(shaped, trained, strict=True)
            ]
        advantages = group_advantages(shaped, shaping.advantage, shaping.scale_by_std)
        for i, (seq, mask) in enumerate(zip(tokens, masks, strict=True)):
            zero = bool(_override(group, i).get("set_advantage_to_zero"))
            self.tokens.append(list(seq))
            self.masks.append(list(mask))
            self.seq_adv.append(0.0 if zero else float(advantages[i]))
            token_row = _row(group.get("advantages"), i, len(seq), "advantages")
            self.tok_adv.append([0.0] * len(seq) if zero and token_row is not None else token_row)
            self.temps.append(sequence_temperature(group, i))
            lp = _row(group.get("inference_logprobs"), i, len(seq), "inference_logprobs")
            self.logprobs.append(lp if extract_inference_logprobs else None)
            self.teacher.append(sequence_teacher_rows(group, i, len(seq)))
            self.scores.append(float(group_scores[i]))

    def padded(self, k: int) -> dict[str, Any]:
        """The rows right-padded to ``k + 1`` tokens and shifted by one: inputs and labels ``[N, k]``."""
        n = len(self.tokens)
        tokens_np = np.zeros((n, k + 1), dtype=np.int64)
        masks_np = np.full((n, k + 1), IGNORE_INDEX, dtype=np.int64)
        logprob_np = np.full((n, k + 1), np.nan, dtype=np.float32)
        tok_adv_np = np.zeros((n, k + 1), dtype=np.float64)
        for r in range(n):
            length = len(self.tokens[r])
            tokens_np[r, :length] = self.tokens[r]
            masks_np[r, :length] = self.masks[r]
            if self.logprobs[r] is not None:
                logprob_np[r, :length] = self.logprobs[r]
            tok_adv_np[r, :] = self.seq_adv[r]
            if self.tok_adv[r] is not None:
                tok_adv_np[r, :length] = self.tok_adv[r]
        return {
            "n": n,
            "inputs": torch.from_numpy(tokens_np[:, :-1].copy()),
            "labels": torch.from_numpy(masks_np[:, 1:].copy()),
            "seq_adv": torch.tensor(self.seq_adv, dtype=torch.float64).unsqueeze(1),
            "tok_adv": torch.from_numpy(tok_adv_np[:, 1:].copy()),
            "temps": torch.tensor(self.temps, dtype=torch.float32).view(n, 1, 1),
            "logprobs": torch.from_numpy(logprob_np[:, 1:].copy()),
            "teacher": teacher_tensors(self.teacher, k + 1),
            "has_lp": np.array([lp is not None for lp in self.logprobs]),
            "has_tok_adv": np.array([a is not None for a in self.tok_adv]),
            "has_teacher": np.array([t is not None for t in self.teacher]),
        }


def _micro_batch(padded: Mapping[str, Any], sl: slice) -> MicroBatch:
    """Rows ``sl`` of the padded batch; per-token advantages, rollout and teacher logprobs only where some
    row of the slice has them."""
    mb = MicroBatch(
        tokens=padded["inputs"][sl],
        labels=padded["labels"][sl],
        advantages=padded["tok_adv"][sl] if padded["has_tok_adv"][sl].any() else padded["seq_adv"][sl],
        temperatures=padded["temps"][sl],
        inference_logprobs=padded["logprobs"][sl] if padded["has_lp"][sl].any() else None,
    )
    teacher = padded["teacher"]
    if teacher is not None and padded["has_teacher"][sl].any():
        mb.teacher_topk_ids, mb.teacher_topk_logprobs = teacher[0][sl], teacher[1][sl]
        mb.teacher_logprobs = label_logprobs(mb.teacher_topk_ids, mb.teacher_topk_logprobs, mb.labels)
    return mb


def pad_data_to_good_offset(
    data: Mapping[str, Any], batch_size: int, extract_inference_logprobs: bool = True
) -> tuple[list, list, list, list, list | None]:
    """compat: ``data["batch"]`` → five per-micro-batch lists (``batch_size``: sequences per micro-batch).

    Returns ``(tokens, labels, advantages, temperatures, inference_logprobs)``; the last is ``None``
    when no sequence of the batch carried usable rollout logprobs. Shapes per micro-batch: tokens and
    labels ``[B, K]`` int64, advantages ``[B, 1]`` float64 (``[B, K]`` with token-level advantages),
    temperatures ``[B, 1, 1]`` float32, logprobs ``[B, K]`` float32 (NaN where unknown).
    """
    prepared = prepare_batch(data["batch"], batch_size, extract_inference_logprobs)
    mbs = prepared.micro_batches
    logprobs = [mb.inference_logprobs for mb in mbs] if prepared.has_inference_logprobs else None
    return (
        [mb.tokens for mb in mbs],
        [mb.labels for mb in mbs],
        [mb.advantages for mb in mbs],
        [mb.temperatures for mb in mbs],
        logprobs,
    )
