"""The scored-group contract: one table of fields, and the one check of a group against it.

A scored group is one prompt's ``N`` sequences with their scores, as an environment sends it to
``POST /scored_data`` and as the trainer receives it from ``GET /batch``. :data:`FIELDS` lists its
fields in the order the API stores and serves them; each field says

- its **scope**: one entry per sequence (:data:`PER_SEQUENCE`, a list of ``N``) or one value for
  the whole group (:data:`PER_GROUP`);
- its **kind**: an integer matrix (one row of int32 values per sequence), a float matrix, a cube
  (per sequence, per position, a top-k row), one float per sequence, an integer, or free-form
  JSON;
- whether it is **required**.

Everything that handles groups is built from the table: the environment's group and rollout
types (:data:`ScoredDataGroup`, :data:`ScoredDataItem`), the environment-side check before a
group is sent (:mod:`atroposlib.envs.serve.group_validation`), the API's request schema, typed decode and
stored form (:mod:`atroposlib.api.decode`), and the trainer's reading of a batch. The content
rules live in :func:`check_group`, used by both the environment and the API; where they differ it
is through :class:`CheckOptions`.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from typing_extensions import TypedDict

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
#: Mask value of positions that are not trained (``masks`` holds the token id elsewhere).
MASKED = -100

PER_SEQUENCE = "sequence"
PER_GROUP = "group"


class Kind(Enum):
    """What a field holds (per sequence for per-sequence fields)."""

    INT_MATRIX = "int matrix"  #: a row of int32 values per sequence
    FLOAT_MATRIX = "float matrix"  #: a row of floats per sequence
    INT_CUBE = "int cube"  #: per sequence, per position, a row of int32 values (top-k ids)
    FLOAT_CUBE = "float cube"  #: per sequence, per position, a row of floats (top-k logprobs)
    FLOATS = "floats"  #: one float per sequence
    INT = "int"  #: one integer for the group
    FREE = "free-form"  #: any JSON, stored as sent


@dataclass(frozen=True)
class GroupField:
    """One field of a scored group.

    ``wire_type`` is the field's type in a group (as sent and served); ``item_type`` its type in a
    single rollout (:data:`ScoredDataItem`), or ``None`` when a rollout does not carry it. ``fill``
    is the entry of a position that is not trained, for the optional fields with one entry per
    token position (``None`` for the others).
    """

    name: str
    scope: str
    kind: Kind
    wire_type: Any
    item_type: Any = None
    required: bool = False
    fill: Any = None


_JSONObject = dict[str, Any]

#: The fields of a scored group, in the order the API stores and serves them.
FIELDS: tuple[GroupField, ...] = (
    GroupField("tokens", PER_SEQUENCE, Kind.INT_MATRIX, list[list[int]], list[int], required=True),
    GroupField("masks", PER_SEQUENCE, Kind.INT_MATRIX, list[list[int]], list[int], required=True),
    GroupField("scores", PER_SEQUENCE, Kind.FLOATS, list[float], float, required=True),
    GroupField("advantages", PER_SEQUENCE, Kind.FLOAT_MATRIX, list[list[float]], list[float], fill=0.0),
    GroupField("ref_logprobs", PER_SEQUENCE, Kind.FLOAT_MATRIX, list[list[float]], list[float], fill=1.0),
    GroupField("messages", PER_SEQUENCE, Kind.FREE, list[list[_JSONObject]], list[_JSONObject]),
    GroupField("generation_params", PER_GROUP, Kind.FREE, _JSONObject),
    GroupField(
        "inference_logprobs", PER_SEQUENCE, Kind.FLOAT_MATRIX, list[list[float]], list[float], fill=1.0
    ),
    GroupField("overrides", PER_SEQUENCE, Kind.FREE, list[_JSONObject], _JSONObject),
    GroupField("group_overrides", PER_GROUP, Kind.FREE, _JSONObject, _JSONObject),
    # compat: free-form; an environment's rollouts each contribute one entry, but its length is not checked.
    GroupField("images", PER_GROUP, Kind.FREE, Any, Any),
    GroupField("env_id", PER_GROUP, Kind.INT, int),
    GroupField(
        "distill_token_ids", PER_SEQUENCE, Kind.INT_CUBE, list[list[list[int]]], list[list[int]], fill=()
    ),
    GroupField(
        "distill_logprobs", PER_SEQUENCE, Kind.FLOAT_CUBE, list[list[list[float]]], list[list[float]], fill=()
    ),
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
BY_NAME: dict[str, GroupField] = {f.name: f for f in FIELDS}
REQUIRED: tuple[str, ...] = tuple(f.name for f in FIELDS if f.required)
OPTIONAL: tuple[str, ...] = tuple(f.name for f in FIELDS if not f.required)
#: Optional fields with one entry per sequence.
PER_SEQUENCE_OPTIONAL: tuple[str, ...] = tuple(
    f.name for f in FIELDS if f.scope == PER_SEQUENCE and not f.required
)
#: Fields a single rollout carries; the optional ones become one entry per sequence of its group.
ITEM_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.item_type is not None)
INT_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.kind in (Kind.INT_MATRIX, Kind.INT_CUBE))
FLOAT_ROW_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.kind is Kind.FLOAT_MATRIX)
FREE_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.kind is Kind.FREE)
#: Optional fields with one entry per token position, and the entry of a position that is not trained.
PER_POSITION_FILL: dict[str, Any] = {f.name: f.fill for f in FIELDS if f.fill is not None}
#: Per-sequence float matrices that must line up with ``tokens`` position by position.
ALIGNED_WITH_TOKENS: tuple[str, ...] = ("inference_logprobs",)

ScoredDataGroup = TypedDict(  # noqa: UP013 - built from the table
    "ScoredDataGroup",
    {f.name: f.wire_type if f.required else f.wire_type | None for f in FIELDS if f.name != "env_id"},
    total=False,
)
ScoredDataGroup.__doc__ = """One prompt's group of scored sequences (an ordinary ``dict`` at runtime).

``tokens`` / ``masks`` / ``scores`` are required; every other key is optional. ``masks`` holds
``-100`` at positions that are not trained and the token id at trained ones; ``inference_logprobs``
is aligned with ``tokens`` (``1.0`` at masked prompt positions). Subclassable; extra keys are
tolerated.
"""
ScoredDataItem = TypedDict(  # noqa: UP013 - built from the table
    "ScoredDataItem",
    {f.name: f.item_type if f.required else f.item_type | None for f in FIELDS if f.item_type is not None},
    total=False,
)
ScoredDataItem.__doc__ = """One scored rollout, the unit ``collect_trajectory`` returns (an ordinary ``dict``).

Its fields are those of :data:`ScoredDataGroup` for one sequence; extra keys are tolerated.
"""


# ---------------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class Problem:
    """One way a group breaks the contract.

    ``code`` names the rule (``length_mismatch``, ``empty_group``, ``int32_range``...), ``loc`` the
    place in the group (``("masks", 1)``), ``message`` says what is wrong in one sentence.
    """

    code: str
    loc: tuple[Any, ...]
    message: str
    value: Any = None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class CheckOptions:
    """Which rules :func:`check_group` applies beyond the core ones.

    - ``optional_counts``: per-sequence optional fields have one entry per sequence, and
      ``inference_logprobs`` rows are as long as their token rows. compat: off at the API, which
      accepts any length there, ``advantages`` included (as atroposlib 0.4.0 did).
    - ``values_typed``: the values already have their types and the int32 range (a typed decode
      checked them), so rows are not walked again: of an int matrix only the number of rows and
      the length of each row are read.
    """

    optional_counts: bool = True
    values_typed: bool = False


ENVIRONMENT = CheckOptions()
API = CheckOptions(optional_counts=False)
API_TYPED = CheckOptions(optional_counts=False, values_typed=True)


def check_group(group: Mapping[str, Any], options: CheckOptions = ENVIRONMENT) -> list[Problem]:
    """Every content problem of ``group`` (a JSON-like mapping), in field order; ``[]`` when none.

    Core rules: ``tokens``, ``masks`` and ``scores`` are lists with one entry per sequence and at
    least one sequence; each sequence has tokens, and its mask row is as long as its token row;
    scores are finite numbers; int fields hold int32 values; free-form fields hold no NaN or
    infinity; ``env_id`` is not negative; every message has ``role`` and ``content``;
    ``group_overrides`` is a dict. Optional rules: see :class:`CheckOptions`.
    """
    problems: list[Problem] = []
    for name in REQUIRED:
        value = group.get(name)
        if value is None:
            return [Problem("missing", (name,), f"missing required key {name!r}")]
        if not isinstance(value, list):
            return [Problem("list_type", (name,), f"{name!r} must be a list, got {type(value).__name__}")]
    tokens, masks, scores = group["tokens"], group["masks"], group["scores"]
    count = len(tokens)
    if count == 0:
        problems.append(Problem("empty_group", ("tokens",), "group has no sequences"))
    if len(masks) != count:
        problems.append(
            Problem("length_mismatch", ("masks",), f"{count} token sequences but {len(masks)} mask sequences")
        )
    if len(scores) != count:
        problems.append(
            Problem("length_mismatch", ("scores",), f"{count} token sequences but {len(scores)} scores")
        )
    problems += _row_problems(tokens, masks, options)
    problems += _score_problems(scores)
    if not options.values_typed:
        for name in INT_FIELDS:
            problems += _int32_problems(name, group.get(name))
    problems += _optional_problems(group, count, options)
    env_id = group.get("env_id")
    if env_id is not None and env_id < 0:
        problems.append(Problem("greater_than_equal", ("env_id",), "env_id must be >= 0", env_id))
    return problems


def _row_problems(tokens: list, masks: list, options: CheckOptions) -> list[Problem]:
    problems = []
    for i, row in enumerate(tokens):
        mask = masks[i] if i < len(masks) else None
        if not options.values_typed and not (isinstance(row, list) and isinstance(mask, list | None)):
            problems.append(
                Problem("list_type", ("tokens", i), f"tokens[{i}] and masks[{i}] must be lists of ints")
            )
        elif not row:
            problems.append(Problem("empty_sequence", ("tokens", i), f"sequence {i} has no tokens"))
        elif mask is not None and len(mask) != len(row):
            problems.append(
                Problem(
                    "length_mismatch",
                    ("masks", i),
                    f"sequence {i} has {len(row)} tokens but {len(mask)} mask entries",
                )
            )
    return problems


def _score_problems(scores: list) -> list[Problem]:
    for i, score in enumerate(scores):
        if isinstance(score, bool) or not isinstance(score, int | float):
            return [Problem("float_type", ("scores", i), f"scores[{i}] is not a number: {score!r}", score)]
        if not math.isfinite(score):
            return [
                Problem("finite_number", ("scores", i), f"scores[{i}] is {score} (scores must be finite)")
            ]
    return []


def _int32_problems(name: str, value: Any) -> list[Problem]:
    """int32 range (and int type) of an int matrix, or of each sequence of an int cube."""
    if value is None:
        return []
    cube = BY_NAME[name].kind is Kind.INT_CUBE
    problems = []
    for i, rows in enumerate(value if cube else [value]):
        prefix = (i,) if cube else ()
        for j, row in enumerate(rows if isinstance(rows, list) else []):
            if not isinstance(row, list):
                continue
            try:
                array("i", row)  # a C loop that checks type and range
            except (OverflowError, TypeError):
                k, bad = next((k, v) for k, v in enumerate(row) if not _is_int32(v))
                code = "int32_range" if isinstance(bad, int) and not isinstance(bad, bool) else "int_type"
                loc = (name, *prefix, j, k)
                problems.append(Problem(code, loc, f"{name} value {bad!r} is not an int32", bad))
    return problems


def _is_int32(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and INT32_MIN <= value <= INT32_MAX


def _optional_problems(group: Mapping[str, Any], count: int, options: CheckOptions) -> list[Problem]:
    problems = []
    for name in PER_SEQUENCE_OPTIONAL:
        value = group.get(name)
        if value is None:
            continue
        if not isinstance(value, list):
            problems.append(
                Problem("list_type", (name,), f"{name!r} must be a list (one entry per sequence) or None")
            )
        elif options.optional_counts and len(value) != count:
            problems.append(
                Problem(
                    "length_mismatch", (name,), f"{name!r} has {len(value)} entries for {count} sequences"
                )
            )
    if options.optional_counts and not problems:
        problems += _aligned_problems(group)
    if not options.values_typed:
        for name in FLOAT_ROW_FIELDS:
            for i, row in enumerate(group.get(name) or ()):
                if isinstance(row, list) and (None in row or _has_non_finite(row)):
                    problems.append(
                        Problem("finite_number", (name, i), f"{name}[{i}] contains NaN or infinity")
                    )
                    break
    for name in FREE_FIELDS:
        value = group.get(name)
        if value is not None and not options.values_typed and _has_non_finite(value):
            problems.append(
                Problem("finite_number", (name,), f"{name} contains NaN or infinity, which JSON cannot carry")
            )
    problems += _message_problems(group.get("messages"))
    overrides = group.get("group_overrides")
    if overrides is not None and not isinstance(overrides, dict):
        problems.append(
            Problem("dict_type", ("group_overrides",), "'group_overrides' must be a dict or None")
        )
    return problems


def _aligned_problems(group: Mapping[str, Any]) -> list[Problem]:
    tokens = group["tokens"]
    problems = []
    for name in ALIGNED_WITH_TOKENS:
        for i, row in enumerate(group.get(name) or ()):
            if isinstance(row, list) and i < len(tokens) and len(row) != len(tokens[i]):
                problems.append(
                    Problem(
                        "length_mismatch",
                        (name, i),
                        f"{name}[{i}] has {len(row)} entries for {len(tokens[i])} tokens",
                    )
                )
    return problems


def _message_problems(messages: Any) -> list[Problem]:
    if not isinstance(messages, list):
        return []
    for i, conversation in enumerate(messages):
        if not isinstance(conversation, list):
            return [
                Problem(
                    "messages", ("messages", i), f"messages[{i}] must be a list of {{role, content}} dicts"
                )
            ]
        for j, message in enumerate(conversation):
            if not isinstance(message, dict) or "role" not in message or "content" not in message:
                return [
                    Problem("messages", ("messages", i, j), f"messages[{i}][{j}] needs 'role' and 'content'")
                ]
    return []


def _has_non_finite(value: Any, depth: int = 0) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if depth > 256:
        return False
    if isinstance(value, dict):
        return any(_has_non_finite(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v, depth + 1) for v in value)
    return False


def sequence_rows(group: Mapping[str, Any], name: str) -> Sequence[Any]:
    """The per-sequence entries of field ``name`` (``[None] * N`` when the group omits it)."""
    value = group.get(name)
    if value is None:
        return [None] * len(group["tokens"])
    return value


__all__ = [
    "API",
    "API_TYPED",
    "BY_NAME",
    "ENVIRONMENT",
    "FIELDS",
    "FIELD_NAMES",
    "INT32_MAX",
    "INT32_MIN",
    "ITEM_FIELDS",
    "MASKED",
    "OPTIONAL",
    "PER_GROUP",
    "PER_SEQUENCE",
    "PER_POSITION_FILL",
    "PER_SEQUENCE_OPTIONAL",
    "REQUIRED",
    "CheckOptions",
    "GroupField",
    "Kind",
    "Problem",
    "ScoredDataGroup",
    "ScoredDataItem",
    "check_group",
    "sequence_rows",
]
