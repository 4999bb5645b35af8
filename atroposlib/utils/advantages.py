"""Advantage helpers for GRPO-style training with per-step (process) rewards."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from atroposlib.type_definitions import number

NumpyArrayLike = np.ndarray | Sequence[np.ndarray] | Sequence[Sequence]
BoolVector = np.ndarray


def allclose_to_first(
    values: NumpyArrayLike,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
    return_vector: bool = False,
) -> BoolVector | bool:
    """Whether every row of ``values`` is element-wise close (``np.isclose``) to row 0.

    ``values`` must be rectangular (any number of dimensions). With ``return_vector`` the answer is a
    boolean array with one entry per row (entry 0 is always True unless row 0 holds NaNs and
    ``equal_nan`` is False); otherwise a plain ``bool``.
    """
    array = values if isinstance(values, np.ndarray) else np.asarray(values)
    close = np.isclose(array, array[0], rtol=rtol, atol=atol, equal_nan=equal_nan)
    per_row = close.reshape(close.shape[0], -1).all(axis=1)
    return per_row if return_vector else bool(per_row.all())


def _accumulate(x) -> tuple[float, float, int]:
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x.item()
    if isinstance(x, numbers.Real) and not isinstance(x, np.ndarray):
        value = float(x)
        return value, value * value, 1
    if isinstance(x, (list, tuple, np.ndarray)):
        total = total_sq = 0.0
        count = 0
        for item in x:
            s, ss, c = _accumulate(item)
            total += s
            total_sq += ss
            count += c
        return total, total_sq, count
    raise ValueError(f"compute_stats: unsupported element of type {type(x).__name__}: {x!r}")


def compute_stats(data: Sequence[number | Sequence]) -> dict[str, float]:
    """Mean and population variance of every number in a (possibly jagged) nested list.

    Returns ``{"mean": float, "var": float}``; ``var`` is never negative (floating-point cancellation in
    the one-pass formula is clamped to 0).

    Raises:
        ValueError: on a non-numeric element, or when there is no number at all.
    """
    total, total_sq, count = _accumulate(data)
    if count == 0:
        raise ValueError("compute_stats: no numerical elements in the input")
    mean = total / count
    variance = max(total_sq / count - mean * mean, 0.0)
    return {"mean": mean, "var": variance}


def compute_discounted_returns(rewards: np.ndarray | Sequence[number], gamma: float) -> np.ndarray:
    """Discounted returns ``G_t = r_t + gamma * G_{t+1}`` of a 1-D reward vector.

    A list is converted to a float32 array; an array keeps its dtype.
    """
    if not isinstance(rewards, np.ndarray):
        rewards = np.asarray(rewards, dtype=np.float32)
    returns = np.empty_like(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def compute_grpo_process_supervision_advantages(
    rewards: Sequence[Sequence[number]], gamma: float | None = None, std_tol: float = 1e-8
) -> list[np.ndarray]:
    """Per-step advantages for a group of trajectories with per-step rewards.

    Every step reward is normalised with the mean and standard deviation over *all* steps of *all*
    trajectories; each trajectory's advantage at step t is then the sum of its normalised rewards from t
    to the end (``gamma=None``) or their discounted return with factor ``gamma``.

    Raises:
        ValueError: when the standard deviation is below ``std_tol`` (all rewards equal), or on bad input.
    """
    stats = compute_stats(rewards)
    std = stats["var"] ** 0.5
    if std < std_tol:
        raise ValueError(
            f"reward std {std} is smaller than the tolerance {std_tol}; advantages are undefined"
        )
    normalised = [(np.asarray(trajectory, dtype=np.float64) - stats["mean"]) / std for trajectory in rewards]
    if gamma is None:
        return [np.flip(np.cumsum(np.flip(t, axis=0), axis=0), axis=0) for t in normalised]
    return [compute_discounted_returns(t, gamma) for t in normalised]
