"""Checking scored groups before they leave an environment (pure functions, no I/O).

:func:`prepare_group` turns whatever an environment returned into a plain-JSON group dict (numpy arrays and
scalars, tuples and tensors become lists and Python numbers) or explains in one sentence why the group cannot
be used. Each problem carries a short ``code`` that the runtime counts in its metrics.

It is also the one home of the group policy: environments return every group they scored, and
:func:`prepare_group` decides from the configuration (``ensure_scores_are_not_same``) whether a group without a
learning signal (:func:`carries_no_signal`) is discarded (``serve``) or kept and marked with
:data:`SCORES_ALL_EQUAL` (``process``, and ``serve`` with the option off).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from atroposlib.group import ENVIRONMENT, OPTIONAL, PER_SEQUENCE_OPTIONAL, check_group

# Problem codes (metric names: ``train/groups_discarded/<code>``).
MALFORMED = "malformed"
EMPTY = "empty"
RAGGED = "ragged"
WRONG_GROUP_SIZE = "wrong_group_size"
NON_FINITE = "non_finite"
TOO_LONG = "too_long"
IDENTICAL_SCORES = "identical_scores"
NOT_JSON = "not_json_serializable"

#: Key set to ``True`` on a kept group whose scores are all equal (the JSONL of ``process`` and its HTML page
#: show it; the trajectory API drops keys it does not know).
SCORES_ALL_EQUAL = "scores_all_equal"

#: Optional keys of a group; missing ones are set to ``None`` before a group is stored or sent.
OPTIONAL_GROUP_KEYS = tuple(name for name in OPTIONAL if name != "env_id")
#: Optional keys holding one entry per sequence.
PER_SEQUENCE_KEYS = PER_SEQUENCE_OPTIONAL
#: The discard code (metric name) of each rule of :func:`atroposlib.group.check_group`.
_CODES = {
    "empty_group": EMPTY,
    "empty_sequence": EMPTY,
    "length_mismatch": RAGGED,
    "finite_number": NON_FINITE,
}


@dataclass(frozen=True)
class GroupProblem:
    """Why a group was discarded: a metric-friendly ``code`` and a human ``message``."""

    code: str
    message: str

    def __str__(self) -> str:
        return self.message


def _json_default(value: Any) -> Any:
    if hasattr(value, "keys") and "input_ids" in value:  # a tokenizer's BatchEncoding where ids belong
        return value["input_ids"]
    for attr in ("tolist", "model_dump", "item"):
        fn = getattr(value, attr, None)
        if callable(fn):
            return fn()
    raise TypeError(f"value of type {type(value).__name__} is not JSON serializable")


def to_plain_json(value: Any) -> Any:
    """Return ``value`` as plain JSON types (dict/list/str/int/float/bool/None).

    numpy arrays/scalars, tuples, tensors (anything with ``tolist``) and pydantic models are converted.
    Non-finite floats become ``None`` (JSON has no NaN). Raises ``TypeError`` for values that cannot be
    represented in JSON.
    """
    try:
        data = orjson.dumps(
            value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=_json_default
        )
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from None
    return orjson.loads(data)


def _coerce_scores(scores: Any) -> tuple[list[float] | None, GroupProblem | None]:
    if hasattr(scores, "tolist") and not isinstance(scores, list):
        scores = scores.tolist()
    if not isinstance(scores, (list, tuple)):
        return None, GroupProblem(
            MALFORMED, f"'scores' must be a list of numbers, got {type(scores).__name__}"
        )
    out: list[float] = []
    for i, score in enumerate(scores):
        try:
            value = float(score)
        except (TypeError, ValueError):
            return None, GroupProblem(MALFORMED, f"scores[{i}] is not a number: {score!r}")
        if not math.isfinite(value):
            return None, GroupProblem(NON_FINITE, f"scores[{i}] is {value} (scores must be finite)")
        out.append(value)
    return out, None


def expected_group_size(group: Mapping[str, Any], default: int) -> int:
    """The size a group must have: ``group_overrides["group_size"]`` when given, else ``default``."""
    overrides = group.get("group_overrides")
    if isinstance(overrides, Mapping) and overrides.get("group_size") is not None:
        try:
            return int(overrides["group_size"])
        except (TypeError, ValueError):
            return default
    return default


def _check_structure(group: dict[str, Any]) -> GroupProblem | None:
    """The first problem :func:`atroposlib.group.check_group` finds, with its discard code."""
    problems = check_group(group, ENVIRONMENT)
    if not problems:
        return None
    first = problems[0]
    return GroupProblem(_CODES.get(first.code, MALFORMED), first.message)


def scores_all_equal(group: Mapping[str, Any]) -> bool:
    """Whether a group of two or more sequences has one score for all of them."""
    scores = group.get("scores") or []
    return len(scores) > 1 and len(set(scores)) == 1


def carries_no_signal(group: Mapping[str, Any]) -> bool:
    """Whether group-relative advantages of ``group`` are zero everywhere: its scores are all equal and it
    carries no per-token ``advantages`` of its own (turn-level advantages may differ where scores do not)."""
    return scores_all_equal(group) and group.get("advantages") is None


def prepare_group(
    raw: Any,
    *,
    default_group_size: int,
    max_token_len: int = -1,
    enforce_max_length: bool = True,
    reject_identical_scores: bool = False,
) -> tuple[dict[str, Any] | None, GroupProblem | None]:
    """Validate and normalise one group returned by an environment.

    Returns ``(group, None)`` with a new plain-JSON dict in which every optional key of
    :data:`OPTIONAL_GROUP_KEYS` is present (``None`` when absent) and extra keys are kept, or
    ``(None, problem)``. ``inference_logprobs`` whose rows are all empty becomes ``None``. Checks, in order: mapping with ``tokens``/``masks``/``scores``; finite numeric
    scores; JSON-representable; the contract of :func:`atroposlib.group.check_group` (its environment
    rules: counts and lengths of every per-sequence field, int32 token ids, finite floats, complete
    messages); size equals :func:`expected_group_size`; with
    ``reject_identical_scores``, a group must carry a learning signal (:func:`carries_no_signal`), and
    without it a kept group whose scores are all equal gets ``group[SCORES_ALL_EQUAL] = True``; with
    ``enforce_max_length`` and ``max_token_len > 0``, every sequence must be shorter than ``max_token_len``.
    """
    if not isinstance(raw, Mapping):
        return None, GroupProblem(MALFORMED, f"expected a dict-like group, got {type(raw).__name__}")
    for key in ("tokens", "masks", "scores"):
        if raw.get(key) is None:
            return None, GroupProblem(MALFORMED, f"missing required key {key!r}")
    scores, problem = _coerce_scores(raw["scores"])
    if problem is not None:
        return None, problem
    try:
        group = to_plain_json({**raw, "scores": scores})
    except TypeError as exc:
        return None, GroupProblem(NOT_JSON, f"group is not JSON-serializable: {exc}")
    logprobs = group.get("inference_logprobs")
    if isinstance(logprobs, list) and logprobs and not any(logprobs):
        # Every row empty: the server gave no logprobs (a text-only endpoint), not a ragged group.
        group["inference_logprobs"] = None
    problem = _check_structure(group)
    if problem is not None:
        return None, problem
    for key in OPTIONAL_GROUP_KEYS:
        group.setdefault(key, None)
    n = len(group["tokens"])
    expected = expected_group_size(group, default_group_size)
    if n != expected:
        return None, GroupProblem(WRONG_GROUP_SIZE, f"group has {n} sequences but group_size is {expected}")
    if scores_all_equal(group):
        if reject_identical_scores and carries_no_signal(group):
            return None, GroupProblem(IDENTICAL_SCORES, f"all {n} scores equal {group['scores'][0]}")
        group[SCORES_ALL_EQUAL] = True
    if enforce_max_length and max_token_len > 0:
        for i, seq in enumerate(group["tokens"]):
            if len(seq) >= max_token_len:
                return None, GroupProblem(
                    TOO_LONG,
                    f"sequence {i} has {len(seq)} tokens; the trainer's max_token_len is {max_token_len}",
                )
    return group, None


def completion_length(mask: list[int]) -> int:
    """Number of trained positions (mask value other than -100) of one sequence."""
    return sum(1 for m in mask if m != -100)


__all__ = [
    "EMPTY",
    "IDENTICAL_SCORES",
    "MALFORMED",
    "NON_FINITE",
    "NOT_JSON",
    "OPTIONAL_GROUP_KEYS",
    "PER_SEQUENCE_KEYS",
    "RAGGED",
    "SCORES_ALL_EQUAL",
    "TOO_LONG",
    "WRONG_GROUP_SIZE",
    "GroupProblem",
    "carries_no_signal",
    "completion_length",
    "expected_group_size",
    "prepare_group",
    "scores_all_equal",
    "to_plain_json",
]
