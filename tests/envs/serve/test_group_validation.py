"""Group checks before sending: ragged data, wrong sizes, NaN, over-long sequences, numpy coercion."""

from __future__ import annotations

import math

import numpy as np
import pytest

from atroposlib.envs.serve import group_validation as gv
from atroposlib.envs.serve.group_validation import prepare_group


def group(n=2, length=3, **extra):
    g = {
        "tokens": [[1] * length for _ in range(n)],
        "masks": [[-100] + [1] * (length - 1) for _ in range(n)],
        "scores": [float(i) for i in range(n)],
    }
    g.update(extra)
    return g


def check(raw, **kw):
    kw.setdefault("default_group_size", 2)
    return prepare_group(raw, **kw)


def test_valid_group_gets_every_optional_key_as_none_and_keeps_extras():
    out, problem = check(group(seed=7))
    assert problem is None
    for key in gv.OPTIONAL_GROUP_KEYS:
        assert key in out and out[key] is None
    assert out["seed"] == 7
    assert out["scores"] == [0.0, 1.0]


def test_numpy_values_are_coerced():
    raw = {
        "tokens": np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64),
        "masks": [np.array([-100, 2, 3]), [np.int64(-100), np.int32(5), 6]],
        "scores": np.array([0.5, -0.5], dtype=np.float32),
        "inference_logprobs": [(1.0, np.float64(-0.1), -0.2), [1.0, -0.3, -0.4]],
        "group_overrides": {"group_size": np.int64(2)},
    }
    out, problem = check(raw)
    assert problem is None
    assert out["tokens"] == [[1, 2, 3], [4, 5, 6]]
    assert all(type(t) is int for row in out["masks"] for t in row)
    assert out["scores"] == [0.5, -0.5] and all(type(s) is float for s in out["scores"])
    assert out["inference_logprobs"][0] == [1.0, -0.1, -0.2]
    assert type(out["group_overrides"]["group_size"]) is int


@pytest.mark.parametrize(
    "raw,code,words",
    [
        ({"tokens": [[1]], "masks": [[1]]}, gv.MALFORMED, "missing required key 'scores'"),
        ("not a group", gv.MALFORMED, "dict-like"),
        (group(n=0), gv.EMPTY, "no sequences"),
        (group(masks=[[1, 1, 1]]), gv.RAGGED, "2 token sequences but 1 mask"),
        (group(scores=[1.0]), gv.RAGGED, "2 token sequences but 1 scores"),
        (group(masks=[[1, 1, 1], [1, 1]]), gv.RAGGED, "sequence 1 has 3 tokens but 2 mask"),
        (group(inference_logprobs=[[0.0] * 3, [0.0] * 2]), gv.RAGGED, "inference_logprobs[1] has 2 entries"),
        (group(advantages=[[0.0] * 3]), gv.RAGGED, "'advantages' has 1 entries for 2 sequences"),
        (group(scores=[1.0, float("nan")]), gv.NON_FINITE, "scores[1] is nan"),
        (group(scores=[math.inf, 1.0]), gv.NON_FINITE, "scores[0] is inf"),
        (group(scores=[1.0, "high"]), gv.MALFORMED, "scores[1] is not a number"),
        (
            group(inference_logprobs=[[0.0, float("nan"), 0.0], [0.0] * 3]),
            gv.NON_FINITE,
            "inference_logprobs[0]",
        ),
        (group(messages=[[{"role": "user"}], []]), gv.MALFORMED, "messages[0][0] needs 'role' and 'content'"),
        (group(group_overrides=[1]), gv.MALFORMED, "group_overrides"),
        (group(tokens=[[1, 2, 3], object()]), gv.NOT_JSON, "not JSON-serializable"),
    ],
)
def test_problems_have_code_and_reason(raw, code, words):
    out, problem = check(raw)
    assert out is None
    assert problem.code == code
    assert words in problem.message


def test_group_size_check_and_override():
    _, problem = check(group(n=3))
    assert problem.code == gv.WRONG_GROUP_SIZE
    assert "3 sequences but group_size is 2" in problem.message
    out, problem = check(group(n=3, group_overrides={"group_size": 3}))
    assert problem is None and out["group_overrides"] == {"group_size": 3}
    # an explicit None is tolerated (the original crashed on it)
    out, problem = check(group(group_overrides=None))
    assert problem is None and out["group_overrides"] is None


def test_identical_scores():
    same = group(scores=[1.0, 1.0])
    assert check(same, reject_identical_scores=False)[1] is None
    _, problem = check(same, reject_identical_scores=True)
    assert problem.code == gv.IDENTICAL_SCORES
    # a single-sequence group can never have "different" scores: it is not discarded
    assert check(group(n=1), default_group_size=1, reject_identical_scores=True)[1] is None


def test_over_long_sequences():
    long_group = group(length=8)
    _, problem = check(long_group, max_token_len=8)
    assert problem.code == gv.TOO_LONG
    assert "sequence 0 has 8 tokens; the trainer's max_token_len is 8" in problem.message
    assert check(long_group, max_token_len=9)[1] is None
    assert check(long_group, max_token_len=8, enforce_max_length=False)[1] is None
    assert check(long_group, max_token_len=-1)[1] is None


def test_input_is_not_mutated():
    raw = group()
    before = repr(raw)
    check(raw)
    assert repr(raw) == before


def test_helpers():
    assert gv.completion_length([-100, -100, 5, 6]) == 2
    assert gv.expected_group_size({"group_overrides": {"group_size": "5"}}, 2) == 5
    assert gv.expected_group_size({"group_overrides": {"other": 1}}, 2) == 2
    assert gv.to_plain_json({"a": (1, np.float32(0.5))}) == {"a": [1, 0.5]}
    with pytest.raises(TypeError):
        gv.to_plain_json({"a": object()})
