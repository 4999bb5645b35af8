"""How the rows of one optimizer step become micro-batches.

A prepared batch is a set of rows (one per sequence) with row-aligned per-row and per-token tensors: the
fields of :class:`~example_trainer.grpo.data.MicroBatch` (tokens, labels, advantages, temperatures, rollout
log-probabilities, teacher data, and whatever is added there later). This module treats those fields
generically: :func:`batch_rows` joins micro-batches into one set of rows, :func:`select_rows` takes any
subset of them, so every per-token field travels with its row whatever the grouping.

:func:`plan_micro_batches` decides the grouping:

* ``token_budget`` None: ``micro_batch_size`` rows at a time, in batch order.
* ``token_budget`` set, ``packed``: rows laid end to end without padding; first-fit decreasing by length,
  so each micro-batch holds at most ``token_budget`` tokens.
* ``token_budget`` set, padded: rows sorted by length and grouped so that ``rows x longest row`` (the
  padded size the model computes) stays within ``token_budget``; rows of a micro-batch are then of
  nearly equal length, so little of the compute goes to padding.

A row's length is the position after its last trained token (what the model must run: causal attention
makes everything later irrelevant). A row longer than the budget gets a micro-batch of its own, the only
case where a micro-batch exceeds the budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from example_trainer.grpo.data import IGNORE_INDEX, MicroBatch, PreparedBatch


def _optional(field: dataclasses.Field) -> bool:
    return "None" in str(field.type)


def _unknown(tensor: torch.Tensor) -> torch.Tensor:
    """Entries that carry no value: NaN for floating fields, negative ids for integer ones."""
    return torch.isnan(tensor) if tensor.is_floating_point() else tensor < 0


def batch_rows(micro_batches: Sequence[MicroBatch]) -> MicroBatch:
    """All rows of ``micro_batches`` as one :class:`MicroBatch` (every field row-aligned).

    A field that some micro-batches lack is filled, for their rows, with "unknown" (NaN for floating
    fields, -1 for integer ones: what the loss reads as no value); a field that is per sequence in some
    micro-batches and per token in others (advantages ``[B, 1]`` / ``[B, K]``) is broadcast to per token.
    """
    values: dict[str, torch.Tensor | None] = {}
    for field in dataclasses.fields(MicroBatch):
        parts = [getattr(mb, field.name) for mb in micro_batches]
        present = [p for p in parts if p is not None]
        if not present:
            values[field.name] = None
            continue
        trailing = torch.broadcast_shapes(*(p.shape[1:] for p in present))
        like = present[0]
        fill = float("nan") if like.is_floating_point() else -1
        values[field.name] = torch.cat(
            [
                p.expand(p.shape[0], *trailing)
                if p is not None
                else torch.full((mb.num_sequences, *trailing), fill, dtype=like.dtype)
                for p, mb in zip(parts, micro_batches, strict=True)
            ]
        ).contiguous()
    return MicroBatch(**values)


def select_rows(rows: MicroBatch, index: Sequence[int] | torch.Tensor) -> MicroBatch:
    """The micro-batch of ``rows`` at ``index`` (any order); an optional field with no known value in
    those rows is None, as :func:`~example_trainer.grpo.data.prepare_batch` leaves it."""
    index = torch.as_tensor(index, dtype=torch.long)
    values: dict[str, torch.Tensor | None] = {}
    for field in dataclasses.fields(MicroBatch):
        value = getattr(rows, field.name)
        if value is not None:
            value = value.index_select(0, index)
            if _optional(field) and bool(_unknown(value).all()):
                value = None
        values[field.name] = value
    return MicroBatch(**values)


def row_lengths(labels: torch.Tensor) -> list[int]:
    """Positions each row needs the model to run: its last trained position + 1 (0: nothing trained)."""
    positions = torch.arange(1, labels.shape[1] + 1)
    return torch.where(labels != IGNORE_INDEX, positions, 0).max(dim=1).values.tolist()


def micro_batch_tokens(lengths: Sequence[int], packed: bool) -> int:
    """Tokens the model runs for rows of these lengths: their sum packed, ``rows x longest`` padded."""
    if not lengths:
        return 0
    return sum(lengths) if packed else len(lengths) * max(lengths)


def plan_micro_batches(
    lengths: Sequence[int], micro_batch_size: int, token_budget: int | None = None, packed: bool = False
) -> list[list[int]]:
    """Row indices of each micro-batch (see the module docstring); every row appears exactly once."""
    n = len(lengths)
    if token_budget is None:
        return [
            list(range(start, min(start + micro_batch_size, n))) for start in range(0, n, micro_batch_size)
        ]
    order = sorted(range(n), key=lambda i: (-lengths[i], i))  # longest first
    groups: list[list[int]] = []
    if packed:  # first-fit decreasing
        used: list[int] = []
        for i in order:
            for g, total in enumerate(used):
                if total + lengths[i] <= token_budget:
                    groups[g].append(i)
                    used[g] += lengths[i]
                    break
            else:
                groups.append([i])
                used.append(lengths[i])
    else:  # sorted: the first row of a group is its longest
        for i in order:
            if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= token_budget:
                groups[-1].append(i)
            else:
                groups.append([i])
    return [sorted(g) for g in groups]


def micro_batches(
    batch: PreparedBatch,
    micro_batch_size: int,
    token_budget: int | None = None,
    packed: bool = False,
    shard: tuple[int, int] | None = None,
    count: int | None = None,
) -> list[MicroBatch | None]:
    """The micro-batches of ``batch`` (or of its rows ``shard = (start, end)``) by
    :func:`plan_micro_batches`, followed by ``None`` placeholders up to ``count`` entries."""
    rows = batch_rows(batch.micro_batches)
    start, end = shard if shard is not None else (0, batch.num_sequences)
    lengths = row_lengths(rows.labels[start:end])
    plan = plan_micro_batches(lengths, micro_batch_size, token_budget, packed)
    result: list[MicroBatch | None] = [select_rows(rows, [start + i for i in group]) for group in plan]
    return result + [None] * max(0, (count or 0) - len(result))


__all__ = [
    "batch_rows",
    "micro_batch_tokens",
    "micro_batches",
    "plan_micro_batches",
    "row_lengths",
    "select_rows",
]
