"""The scored-group contract: the field table and the one check used by environments, API and trainer."""

from __future__ import annotations

import math

import pytest

from atroposlib.group import (
    API,
    API_TYPED,
    ENVIRONMENT,
    FIELD_NAMES,
    PER_POSITION_FILL,
    PER_SEQUENCE_OPTIONAL,
    REQUIRED,
    ScoredDataGroup,
    ScoredDataItem,
    check_group,
)


def group(n=2, **fields):
    base = {"tokens": [[1, 2, 3]] * n, "masks": [[-100, 2, 3]] * n, "scores": [float(i) for i in range(n)]}
    return base | fields


def codes(problems):
    return [(p.code, p.loc) for p in problems]


def test_the_table_is_the_originals_fourteen_keys_in_stored_order():
    assert FIELD_NAMES == (
        "tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params",
        "inference_logprobs", "overrides", "group_overrides", "images", "env_id", "distill_token_ids",
        "distill_logprobs",
    )  # fmt: skip
    assert REQUIRED == ("tokens", "masks", "scores")
    assert set(ScoredDataGroup.__annotations__) == set(FIELD_NAMES) - {"env_id"}
    assert "generation_params" not in ScoredDataItem.__annotations__
    assert set(PER_POSITION_FILL) == {
        "advantages", "ref_logprobs", "inference_logprobs", "distill_token_ids", "distill_logprobs"
    }  # fmt: skip
    assert set(PER_POSITION_FILL) <= set(PER_SEQUENCE_OPTIONAL)


def test_the_typed_dicts_are_plain_subclassable_dicts():
    class Extended(ScoredDataGroup):
        seed: int

    assert Extended(tokens=[[1]], seed=3) == {"tokens": [[1]], "seed": 3}


@pytest.mark.parametrize("options", [ENVIRONMENT, API, API_TYPED])
def test_a_valid_group_has_no_problems(options):
    assert check_group(group(inference_logprobs=[[1.0, -0.5, -0.1]] * 2, env_id=0), options) == []


@pytest.mark.parametrize("options", [ENVIRONMENT, API])
def test_core_rules_hold_everywhere(options):
    assert codes(check_group(group(n=0), options)) == [("empty_group", ("tokens",))]
    assert codes(check_group(group(masks=[[1, 2, 3]]), options)) == [("length_mismatch", ("masks",))]
    assert codes(check_group(group(scores=[1.0]), options)) == [("length_mismatch", ("scores",))]
    assert codes(check_group(group(masks=[[1, 2, 3], [1, 2]]), options)) == [
        ("length_mismatch", ("masks", 1))
    ]
    assert codes(check_group(group(tokens=[[1, 2, 3], []], masks=[[1, 2, 3], []]), options)) == [
        ("empty_sequence", ("tokens", 1))
    ]
    assert codes(check_group(group(scores=[1.0, math.inf]), options)) == [("finite_number", ("scores", 1))]
    assert codes(check_group(group(tokens=[[1, 2**31, 3]] * 2), options))[0] == (
        "int32_range",
        ("tokens", 0, 1),
    )
    assert codes(check_group(group(env_id=-1), options)) == [("greater_than_equal", ("env_id",))]
    assert codes(check_group(group(messages=[[{"role": "user"}], []]), options)) == [
        ("messages", ("messages", 0, 0))
    ]
    assert codes(check_group(group(generation_params={"t": math.nan}), options)) == [
        ("finite_number", ("generation_params",))
    ]
    assert codes(check_group({"tokens": [[1]], "masks": [[1]]}, options)) == [("missing", ("scores",))]


def test_optional_lengths_are_checked_by_environments_only():
    """compat: the original's API accepts optional per-sequence fields of any length."""
    short = group(advantages=[[0.0]], inference_logprobs=[[1.0], [1.0, 2.0, 3.0]])
    assert check_group(short, API) == []
    assert codes(check_group(short, ENVIRONMENT)) == [("length_mismatch", ("advantages",))]
    misaligned = group(inference_logprobs=[[1.0, 2.0, 3.0], [1.0]])
    assert codes(check_group(misaligned, ENVIRONMENT)) == [("length_mismatch", ("inference_logprobs", 1))]
    assert check_group(misaligned, API) == []


def test_typed_values_are_not_walked_again():
    """A typed decode already checked int32 ranges and finite floats (the API's msgspec path)."""
    assert check_group(group(tokens=[[1, 2**40, 3]] * 2), API_TYPED) == []
    assert codes(check_group(group(tokens=[[1, 2**40, 3]] * 2), API))[0][0] == "int32_range"
