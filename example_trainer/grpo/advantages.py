r"""Sequence advantages from a group's scores (``--advantage``) and DAPO's overlong reward shaping.

For a group of ``G`` completions of one prompt with scores ``R_1..R_G`` (mean ``mu``, population
standard deviation ``sigma``):

=========  ===================================================================================
``grpo``   ``A_i = (R_i - mu) / max(sigma, 1e-8)`` (Shao et al. 2024); without the division by
           ``sigma`` for ``--loss-type dr_grpo`` (Liu et al. 2025: the division favours groups that
           are nearly all right or all wrong).
``rloo``   ``A_i = R_i - 1/(G-1) sum_{j != i} R_j = G/(G-1) (R_i - mu)``, the leave-one-out baseline
           (Ahmadian et al. 2024, REINFORCE leave-one-out).
``none``   ``A_i = R_i``: no baseline (plain REINFORCE on the scores).
=========  ===================================================================================

A one-completion group has no baseline: its advantage is its raw score under every estimator.

DAPO's overlong penalty (Yu et al. 2025, "soft overlong punishment") is added to the score of a
completion of ``|y|`` tokens before the advantages are computed, with ``L_max`` the generation budget
(``--max-completion-tokens``) and ``L_cache`` the buffer (``--overlong-buffer``):

.. math::

    R_\mathrm{length}(y) = \begin{cases} 0 & |y| \le L_\mathrm{max} - L_\mathrm{cache} \\
        \frac{(L_\mathrm{max} - L_\mathrm{cache}) - |y|}{L_\mathrm{cache}} &
        L_\mathrm{max} - L_\mathrm{cache} < |y| \le L_\mathrm{max} \\ -1 & |y| > L_\mathrm{max} \end{cases}

so answers that run into the budget (cut answers) lose reward linearly, down to -1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

AdvantageType = Literal["grpo", "rloo", "none"]
#: Floor of the per-group standard deviation.
STD_EPS = 1e-8


def group_advantages(
    scores: Sequence[float], estimator: AdvantageType = "grpo", scale_by_std: bool = True
) -> np.ndarray:
    """Advantages [G] of one group's scores [G] (formulas in the module docstring)."""
    r = np.asarray(scores, dtype=np.float64)
    if r.size <= 1 or estimator == "none":
        return r.copy()
    centred = r - r.mean()
    if estimator == "rloo":
        return centred * r.size / (r.size - 1)
    if estimator == "grpo":
        return centred / max(float(r.std()), STD_EPS) if scale_by_std else centred
    raise ValueError(f"unknown advantage estimator {estimator!r} (expected grpo, rloo or none)")


def overlong_penalty(length: int, max_tokens: int, buffer: int) -> float:
    """DAPO's soft overlong punishment of a completion of ``length`` tokens (0, a linear ramp in the
    last ``buffer`` tokens of the ``max_tokens`` budget, -1 beyond it)."""
    if buffer <= 0:
        return -1.0 if length > max_tokens else 0.0
    start = max_tokens - buffer
    if length <= start:
        return 0.0
    if length > max_tokens:
        return -1.0
    return (start - length) / buffer


__all__ = ["AdvantageType", "STD_EPS", "group_advantages", "overlong_penalty"]
