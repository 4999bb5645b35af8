"""atroposlib.utils.advantages: the semantics pinned by the original's tests, plus edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from atroposlib.utils.advantages import (
    allclose_to_first,
    compute_discounted_returns,
    compute_grpo_process_supervision_advantages,
    compute_stats,
)


def test_allclose_to_first_all_close():
    assert allclose_to_first([1.0, 1.0, 1.0]) is True


def test_allclose_to_first_vector():
    result = allclose_to_first([1.0, 1.000000001, 1.000000002], return_vector=True)
    assert isinstance(result, np.ndarray)
    assert result.dtype == bool and result.tolist() == [True, True, True]


def test_allclose_to_first_not_close():
    assert allclose_to_first([1.0, 1.0, 1.1]) is False
    assert allclose_to_first([1.0, 1.0, 1.1], return_vector=True).tolist() == [True, True, False]


def test_allclose_to_first_nan():
    values = [float("nan"), float("nan")]
    assert allclose_to_first(values, equal_nan=False) is False
    assert allclose_to_first(values, equal_nan=True) is True


def test_allclose_to_first_compares_whole_rows_of_any_rank():
    rows = np.array([[[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.5]]])
    assert allclose_to_first(rows, return_vector=True).tolist() == [True, True, False]
    assert allclose_to_first([[1, 2], [1, 2]]) is True
    assert allclose_to_first([1.0, 1.05], atol=0.1) is True


def test_compute_stats():
    stats = compute_stats([1, 2, 3, [4, 5]])
    assert math.isclose(stats["mean"], 3.0, rel_tol=1e-5)
    assert math.isclose(stats["var"], 2.0, rel_tol=1e-5)


def test_compute_stats_empty():
    with pytest.raises(ValueError):
        compute_stats([])
    with pytest.raises(ValueError):
        compute_stats([[], [[]]])


def test_compute_stats_jagged():
    stats = compute_stats([[1, 2], 3, [4, [5, 6]]])
    mean = 21 / 6
    assert math.isclose(stats["mean"], mean, rel_tol=1e-5)
    assert math.isclose(stats["var"], (91 / 6) - mean**2, rel_tol=1e-5)


def test_compute_stats_rejects_non_numbers():
    with pytest.raises(ValueError, match="str"):
        compute_stats([1, "2"])
    with pytest.raises(ValueError):
        compute_stats([1, None])
    with pytest.raises(ValueError):
        compute_stats({"a": 1})


def test_compute_stats_accepts_numpy_scalars():
    stats = compute_stats([np.float32(1.0), np.int64(3), [np.float64(2.0)]])
    assert math.isclose(stats["mean"], 2.0) and math.isclose(stats["var"], 2 / 3)


def test_compute_stats_constant_float_variance_non_negative():
    stats = compute_stats([0.1, 0.1, 0.1])
    assert stats["var"] >= 0.0
    assert isinstance(stats["var"] ** 0.5, float)


def test_compute_discounted_returns():
    returns = compute_discounted_returns(np.array([1.0, 1.0, 1.0]), 0.9)
    assert np.allclose(returns, [2.71, 1.9, 1.0], rtol=1e-5, atol=1e-8)


def test_compute_discounted_returns_list_input():
    returns = compute_discounted_returns([1, 1, 1], 0.0)
    assert returns.dtype == np.float32
    assert np.allclose(returns, [1.0, 1.0, 1.0])


def test_compute_discounted_returns_empty():
    assert compute_discounted_returns([], 0.9).shape == (0,)


def test_compute_grpo_process_supervision_advantages_cumsum():
    advantages = compute_grpo_process_supervision_advantages([[1, 2, 3], [4, 5]], gamma=None)
    s = math.sqrt(2)
    for got, want in zip(advantages[0].tolist(), [-3 / s, -1 / s, 0.0], strict=True):
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-12)
    for got, want in zip(advantages[1].tolist(), [3 / s, 2 / s], strict=True):
        assert math.isclose(got, want, rel_tol=1e-5)


def test_compute_grpo_process_supervision_advantages_discounted():
    gamma = 0.9
    advantages = compute_grpo_process_supervision_advantages([[1, 2, 3], [4, 5]], gamma=gamma)
    s = math.sqrt(2)
    a1, a2, a3 = -2 / s, -1 / s, 0.0
    b1, b2 = 1 / s, 2 / s
    for got, want in zip(advantages[0].tolist(), [a1 + gamma * a2, a2, a3], strict=True):
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-12)
    for got, want in zip(advantages[1].tolist(), [b1 + gamma * b2, b2], strict=True):
        assert math.isclose(got, want, rel_tol=1e-5)


def test_compute_grpo_process_supervision_advantages_std_tol():
    with pytest.raises(ValueError):
        compute_grpo_process_supervision_advantages([[1, 1, 1]])


def test_compute_grpo_process_supervision_advantages_std_tol_float():
    with pytest.raises(ValueError):
        compute_grpo_process_supervision_advantages([[0.1, 0.1, 0.1]])


def test_process_supervision_advantages_sum_to_zero_at_the_last_step():
    # Normalised rewards of all steps have mean 0, so the per-step values (last step only) balance out.
    advantages = compute_grpo_process_supervision_advantages([[1.0], [0.0], [0.5], [0.5]])
    assert math.isclose(sum(a[-1] for a in advantages), 0.0, abs_tol=1e-12)
    assert [len(a) for a in advantages] == [1, 1, 1, 1]
