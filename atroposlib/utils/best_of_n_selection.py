"""Pick the best alternative of a group by a primary score, breaking ties with a secondary score."""

from __future__ import annotations

from collections.abc import Sequence


def select_best_index(
    primary_scores: Sequence[float | int],
    secondary_scores: Sequence[float | int],
    primary_higher_is_better: bool = True,
    secondary_lower_is_better: bool = True,
) -> int:
    """Index of the best item: best primary score, ties broken by the secondary score, then by the
    lowest index.

    Raises:
        ValueError: either list is empty, or their lengths differ.
    """
    if not primary_scores or not secondary_scores:
        raise ValueError("select_best_index: score lists must not be empty")
    if len(primary_scores) != len(secondary_scores):
        raise ValueError(
            f"select_best_index: {len(primary_scores)} primary scores but {len(secondary_scores)} secondary scores"
        )
    primary_sign = 1 if primary_higher_is_better else -1
    secondary_sign = -1 if secondary_lower_is_better else 1
    best = 0
    for i in range(1, len(primary_scores)):
        p_i, p_best = primary_sign * primary_scores[i], primary_sign * primary_scores[best]
        if p_i > p_best or (
            p_i == p_best and secondary_sign * secondary_scores[i] > secondary_sign * secondary_scores[best]
        ):
            best = i
    return best
