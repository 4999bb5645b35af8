"""Rejection sampling over one group's scores: which sequences become SFT records or DPO pairs.

Both functions work on indices so the caller decides what a sequence's text is (decoded tokens or
messages). The rules: stable descending sort by score, ``score > 0`` unless negatives are allowed (zero is dropped
too), and a strict score-difference threshold.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def select_sft(
    scores: Sequence[float],
    *,
    top_n: int,
    allow_negative_scores: bool = False,
    min_score_diff: float = 0.0,
) -> list[int]:
    """Indices of the sequences to keep as SFT records, best score first.

    1. Sort by score, descending; ties keep their group order.
    2. Unless ``allow_negative_scores``, keep only ``score > 0``.
    3. If ``min_score_diff > 0``, keep only ``score - min(scores) > min_score_diff`` (minimum over
       the whole group, before filtering).
    4. Keep at most ``top_n``.
    """
    if not scores or top_n <= 0:
        return []
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if not allow_negative_scores:
        order = [i for i in order if scores[i] > 0]
    if min_score_diff > 0:
        low = min(scores)
        order = [i for i in order if scores[i] - low > min_score_diff]
    return order[:top_n]


def select_dpo_pairs(
    scores: Sequence[float],
    *,
    n_pairs: int,
    allow_negative_scores: bool = False,
    min_score_diff: float = 0.5,
    rng: random.Random | None = None,
) -> list[tuple[int, int]]:
    """``[(chosen_index, rejected_index), ...]`` for one group, at most ``n_pairs``.

    * Positives: all sequences by score descending (ties in group order), filtered to
      ``score > 0`` unless ``allow_negative_scores``.
    * Negative pool: the ``n_pairs`` lowest-scoring sequences (ascending; never filtered).
    * For each of the first ``n_pairs`` positives, the candidates are the pool entries with
      ``score < positive_score - min_score_diff`` (strict) other than the positive itself; one is
      drawn with ``rng.choice`` and removed from the pool. Positives without a candidate are skipped.

    A sequence may be chosen in one pair and rejected in another, but is never paired with itself
    (even with a negative threshold).
    """
    if not scores or n_pairs <= 0:
        return []
    rng = rng or random.Random()
    positives = sorted(range(len(scores)), key=lambda i: -scores[i])
    pool = sorted(range(len(scores)), key=lambda i: scores[i])[:n_pairs]
    if not allow_negative_scores:
        positives = [i for i in positives if scores[i] > 0]
    pairs: list[tuple[int, int]] = []
    for pos in positives[:n_pairs]:
        candidates = [j for j in pool if j != pos and scores[j] < scores[pos] - min_score_diff]
        if not candidates:
            continue
        neg = rng.choice(candidates)
        pool.remove(neg)
        pairs.append((pos, neg))
    return pairs
