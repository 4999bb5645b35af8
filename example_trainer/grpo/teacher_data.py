"""A teacher's top-k log-probabilities (``distill_token_ids`` / ``distill_logprobs``) as training tensors.

Groups from a teacher-distillation environment carry, per sequence and per token position ``p``, the
teacher's top-k token ids and log-probabilities of the distribution that predicts token ``p`` (vLLM's
``prompt_logprobs`` layout, aligned with ``tokens``). The trainer's model position ``t`` predicts token
``t + 1``, so rows are shifted by one like the labels. Rows whose length differs from their tokens', or a
group without the fields, give no teacher data for those sequences (the loss then has no distillation
term there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch


def sequence_teacher_rows(group: Mapping[str, Any], i: int, length: int) -> tuple[list, list] | None:
    """Sequence ``i``'s ``(ids, logprobs)`` per position, or None when absent or misaligned."""
    ids, lps = group.get("distill_token_ids"), group.get("distill_logprobs")
    if not isinstance(ids, list) or not isinstance(lps, list) or i >= len(ids) or i >= len(lps):
        return None
    row_ids, row_lps = ids[i], lps[i]
    if row_ids is None or row_lps is None or len(row_ids) != length or len(row_lps) != length:
        return None
    return row_ids, row_lps


def teacher_tensors(
    rows: Sequence[tuple[list, list] | None], width: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(ids [n, width - 1, k] int64 (-1 padding), logprobs [n, width - 1, k] float32 (NaN padding))``,
    shifted so that model position ``t`` holds the teacher's entries for token ``t + 1``; None when no
    row has teacher data."""
    if all(r is None for r in rows):
        return None
    k = max((len(pos) for r in rows if r is not None for pos in r[0]), default=1) or 1
    ids = np.full((len(rows), width, k), -1, dtype=np.int64)
    lps = np.full((len(rows), width, k), np.nan, dtype=np.float32)
    for n, row in enumerate(rows):
        if row is None:
            continue
        for p, (pid, plp) in enumerate(zip(*row, strict=True)):
            m = min(len(pid), len(plp), k)
            if m:
                ids[n, p, :m] = pid[:m]
                lps[n, p, :m] = plp[:m]
    return torch.from_numpy(ids[:, 1:].copy()), torch.from_numpy(lps[:, 1:].copy())


def label_logprobs(ids: torch.Tensor, logprobs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[B, K] the teacher's log-probability of each label (``NaN`` where the label is not among the
    teacher's entries at that position), from ``ids``/``logprobs`` [B, K, k] and ``labels`` [B, K]."""
    hit = ids == labels.unsqueeze(-1)  # [B, K, k]
    found = hit.any(dim=-1)
    first = hit.to(torch.int8).argmax(dim=-1, keepdim=True)  # the first entry holding the label
    value = logprobs.gather(-1, first).squeeze(-1)
    return torch.where(found, value, torch.full_like(value, float("nan")))


__all__ = ["label_logprobs", "sequence_teacher_rows", "teacher_tensors"]
