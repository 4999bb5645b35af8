"""Pure validation of scored groups: decoding, content checks, admission checks, encoding.

Errors are lists of FastAPI-style error dicts (``type``, ``loc``, ``msg`` and optionally
``input``/``ctx``) whose ``loc`` starts with ``"body"``, so a rejected request has the same
``422 {"detail": [...]}`` shape as the original's schema errors.

Checks, in order (a group is rejected on the first failing stage):

1. JSON and schema (pydantic's lax rules, like the original; NaN/Infinity rejected);
2. content: at least one sequence; ``masks`` and ``scores`` match ``tokens`` in count and
   ``masks`` rows match ``tokens`` rows in length; no empty sequence; token ids and mask values
   within int32; ``env_id`` not negative; no NaN/Infinity anywhere. ``advantages`` and the other
   per-token fields are deliberately not length-checked (the original accepts any length);
3. admission against the current registration: ``env_id`` registered, sequences no longer than
   ``max_token_len``, and a group size that can ever be batched.

Decoding has three paths with the same outcome, tried in turn. Plainly well-formed groups are
decoded by simdjson into the packed stored form without a Python int per token
(:mod:`atroposlib.api.simd_decode`). Well-formed groups it declines (e.g. one with a ``\u005b``
escape) are decoded and encoded by msgspec (:mod:`atroposlib.api.strict_schema`), including the
int32 range check. Anything else (lax coercions such as ``1.0`` for an int, bad types, NaN, odd
messages) goes through the pydantic model of the original, which decides acceptance and
produces the error details.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from pydantic import TypeAdapter, ValidationError

from atroposlib.api import simd_decode
from atroposlib.api.schemas import FREE_FORM_FIELDS, ScoredData
from atroposlib.api.strict_schema import INT32_MAX, INT32_MIN, StrictGroup, messages_complete

#: Error inputs larger than this many items are elided from error responses.
MAX_ERROR_INPUT_ITEMS = 64
#: At most this many errors are reported for one request.
MAX_ERRORS = 50

_GROUP_LIST = TypeAdapter(list[ScoredData])
_ENCODER = msgspec.json.Encoder()
_ONE = msgspec.json.Decoder(StrictGroup)
_MANY = msgspec.json.Decoder(list[StrictGroup])


class InvalidRequest(Exception):
    """The request body is unacceptable; ``errors`` are FastAPI-style error dicts."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__(errors[0]["msg"] if errors else "invalid request")
        self.errors = errors[:MAX_ERRORS]

    def __reduce__(self):  # rebuilt from the errors, not from the message (decode workers pickle it)
        return (InvalidRequest, (self.errors,))


@dataclass(slots=True)
class Group:
    """A decoded, schema-valid group: what the checks and the queue need.

    ``data`` is the stored form (:mod:`atroposlib.api.stored_group`: the compact JSON of the
    14-key dict, or its packed form); ``problems`` holds content problems found while decoding
    (relative locs).
    """

    token_lengths: list[int]
    mask_lengths: list[int]
    scores: list[float]
    env_id: int | None
    data: bytes
    problems: list[dict[str, Any]] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Number of sequences."""
        return len(self.token_lengths)


@dataclass(frozen=True)
class AdmissionRules:
    """What the current registration requires of an incoming group.

    ``batch_size``/``max_token_len`` are ``None`` before a trainer registered. ``env_group_sizes``
    lists the registered envs' group sizes by env id. ``env_id_required`` is set while an env with
    ``min_batch_allocation`` is registered (groups without one are never batched then).
    """

    batch_size: int | None = None
    max_token_len: int | None = None
    env_group_sizes: Sequence[int] = field(default_factory=tuple)
    env_id_required: bool = False


def error(kind: str, loc: Sequence[Any], msg: str, **extra: Any) -> dict[str, Any]:
    """One FastAPI-style error dict."""
    return {"type": kind, "loc": list(loc), "msg": msg, **extra}


# ---------------------------------------------------------------------------------- decoding


def decode_group(body: bytes) -> Group:
    """Parse and schema-validate one group (``POST /scored_data``); raises :class:`InvalidRequest`."""
    _require_body(body)
    plain = simd_decode.decode_one(body)
    if plain is not None:
        return Group(*plain)
    try:
        fast = _ONE.decode(body)
    except (msgspec.MsgspecError, RecursionError, ValueError):
        fast = None
    if fast is not None and messages_complete(fast.messages):
        return _from_fast(fast)
    try:
        model = ScoredData.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequest(_pydantic_errors(exc, body)) from None
    return _from_model(model)


def decode_group_list(body: bytes) -> list[Group]:
    """Parse and schema-validate a JSON array of groups (``POST /scored_data_list``)."""
    _require_body(body)
    plain = simd_decode.decode_many(body)
    if plain is not None:
        return [Group(*group) for group in plain]
    try:
        fast = _MANY.decode(body)
    except (msgspec.MsgspecError, RecursionError, ValueError):
        fast = None
    if fast is not None and all(messages_complete(g.messages) for g in fast):
        return [_from_fast(g) for g in fast]
    try:
        models = _GROUP_LIST.validate_json(body)
    except ValidationError as exc:
        raise InvalidRequest(_pydantic_errors(exc, body)) from None
    return [_from_model(m) for m in models]


def _from_fast(group: StrictGroup) -> Group:
    return Group(
        token_lengths=[len(row) for row in group.tokens],
        mask_lengths=[len(row) for row in group.masks],
        scores=group.scores,
        env_id=group.env_id,
        data=_ENCODER.encode(group),
    )


def _from_model(model: ScoredData) -> Group:
    problems = _int32_problems("tokens", model.tokens) + _int32_problems("masks", model.masks)
    if model.distill_token_ids is not None:
        for i, seq in enumerate(model.distill_token_ids):
            problems.extend(_int32_problems("distill_token_ids", seq, prefix=[i]))
    for name in FREE_FORM_FIELDS:
        value = getattr(model, name)
        if value is not None and _has_non_finite(value):
            problems.append(
                error("finite_number", [name], f"{name} contains NaN or Infinity, which JSON cannot carry")
            )
    try:
        data = _ENCODER.encode(model.to_group())
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError) as exc:
        data = b""
        problems.append(error("unencodable", [], f"the group cannot be stored as JSON: {exc}"))
    return Group(
        token_lengths=[len(row) for row in model.tokens],
        mask_lengths=[len(row) for row in model.masks],
        scores=model.scores,
        env_id=model.env_id,
        data=data,
        problems=problems,
    )


def decode_model(model: type, body: bytes) -> Any:
    """Parse and validate a small JSON body into ``model`` (raises :class:`InvalidRequest`)."""
    _require_body(body)
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequest(_pydantic_errors(exc, body)) from None


def _require_body(body: bytes) -> None:
    if not body:
        raise InvalidRequest([error("missing", ["body"], "Field required", input=None)])


def _pydantic_errors(exc: ValidationError, body: bytes) -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors(include_url=False):
        if err["type"] == "json_invalid":
            return [_json_error(body, err)]
        entry = {"type": err["type"], "loc": ["body", *err["loc"]], "msg": err["msg"]}
        if "input" in err:
            entry["input"] = small_input(err["input"])
        ctx = err.get("ctx")
        if ctx:
            entry["ctx"] = {k: (str(v) if isinstance(v, Exception) else v) for k, v in ctx.items()}
        errors.append(entry)
        if len(errors) >= MAX_ERRORS:
            break
    return errors


def _json_error(body: bytes, err: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's shape for undecodable JSON: loc ``["body", <char offset>]``."""
    try:
        json.loads(body)
    except json.JSONDecodeError as exc:
        return error("json_invalid", ["body", exc.pos], "JSON decode error", input={}, ctx={"error": exc.msg})
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        return error("json_invalid", ["body", 0], "JSON decode error", input={}, ctx={"error": str(exc)})
    # Valid for Python's parser but not for pydantic's (e.g. lone surrogates, nesting too deep).
    return error("json_invalid", ["body", 0], "JSON decode error", input={}, ctx={"error": err["msg"]})


def small_input(value: Any) -> Any:
    """Elide large inputs so an error response never echoes a whole batch of tokens."""
    if isinstance(value, bytes | bytearray):
        return value[:1000].decode("utf-8", errors="replace")
    if isinstance(value, list | dict) and len(value) > MAX_ERROR_INPUT_ITEMS:
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, str) and len(value) > 1000:
        return value[:1000] + "..."
    if isinstance(value, list):
        return [small_input(v) for v in value]
    if isinstance(value, dict):
        return {k: small_input(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------- content


def content_problems(group: Group) -> list[dict[str, Any]]:
    """Structural problems of one schema-valid group; locs are relative to the group."""
    count = group.size
    problems: list[dict[str, Any]] = []
    if count == 0:
        problems.append(error("empty_group", ["tokens"], "a group needs at least one sequence"))
    if len(group.mask_lengths) != count:
        problems.append(
            error(
                "length_mismatch",
                ["masks"],
                f"masks has {len(group.mask_lengths)} rows but tokens has {count} sequences",
            )
        )
    if len(group.scores) != count:
        problems.append(
            error(
                "length_mismatch",
                ["scores"],
                f"scores has {len(group.scores)} values but tokens has {count} sequences",
            )
        )
    for i, length in enumerate(group.token_lengths):
        if not length:
            problems.append(error("empty_sequence", ["tokens", i], f"sequence {i} has no tokens"))
        elif i < len(group.mask_lengths) and group.mask_lengths[i] != length:
            problems.append(
                error(
                    "length_mismatch",
                    ["masks", i],
                    f"masks[{i}] has {group.mask_lengths[i]} values but tokens[{i}] has {length}",
                )
            )
    problems.extend(dict(p) for p in group.problems)
    if group.env_id is not None and group.env_id < 0:
        problems.append(
            error(
                "greater_than_equal",
                ["env_id"],
                "env_id must be >= 0",
                input=group.env_id,
                ctx={"ge": 0},
            )
        )
    return problems[:MAX_ERRORS]


def _int32_problems(name: str, rows: list[list[int]], prefix: Sequence[int] = ()) -> list[dict[str, Any]]:
    problems = []
    for i, row in enumerate(rows):
        try:
            array("i", row)  # C-speed range check
        except OverflowError:
            j, bad = next((j, v) for j, v in enumerate(row) if not INT32_MIN <= v <= INT32_MAX)
            problems.append(
                error(
                    "int32_range",
                    [name, *prefix, i, j],
                    f"{name} value {bad} is outside the int32 range",
                    input=bad,
                )
            )
    return problems


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


# ---------------------------------------------------------------------------------- admission


def admission_problems(group: Group, rules: AdmissionRules) -> list[dict[str, Any]]:
    """Problems of a structurally valid group against the current registration (relative locs)."""
    problems: list[dict[str, Any]] = []
    size = group.size
    env_id = group.env_id
    if env_id is None:
        if rules.env_id_required:
            problems.append(
                error(
                    "env_id_required",
                    ["env_id"],
                    "env_id is required while an environment with min_batch_allocation is "
                    "registered: groups without one are never batched",
                )
            )
    elif env_id >= len(rules.env_group_sizes):
        problems.append(
            error(
                "unknown_env_id",
                ["env_id"],
                f"unknown env_id {env_id}: {len(rules.env_group_sizes)} environment(s) are registered; "
                "register with /register-env first",
                input=env_id,
            )
        )
    else:
        group_size = rules.env_group_sizes[env_id]
        if size > group_size:
            problems.append(
                error(
                    "unbatchable_group",
                    ["tokens"],
                    f"a group of {size} sequences can never be batched: it is larger than env "
                    f"{env_id}'s group_size {group_size}",
                )
            )
        elif size < group_size and group_size % size:
            problems.append(
                error(
                    "unbatchable_group",
                    ["tokens"],
                    f"a partial group of {size} sequences can never be batched: it does not divide "
                    f"env {env_id}'s group_size {group_size}",
                )
            )
    if rules.batch_size and size:
        if size > rules.batch_size or rules.batch_size % size:
            problems.append(
                error(
                    "unbatchable_group",
                    ["tokens"],
                    f"a group of {size} sequences can never be batched: group sizes must divide "
                    f"the batch size {rules.batch_size}",
                )
            )
    if rules.max_token_len and rules.max_token_len > 0:
        for i, length in enumerate(group.token_lengths):
            if length > rules.max_token_len:
                problems.append(
                    error(
                        "sequence_too_long",
                        ["tokens", i],
                        f"sequence {i} has {length} tokens, more than the registered "
                        f"max_token_len {rules.max_token_len}",
                    )
                )
    return problems[:MAX_ERRORS]


def group_problems(group: Group, rules: AdmissionRules) -> list[dict[str, Any]]:
    """Content problems, or (if none) admission problems, of one group (relative locs)."""
    return content_problems(group) or admission_problems(group, rules)


def check_groups(groups: list[Group], rules: AdmissionRules, *, in_list: bool) -> None:
    """Raise :class:`InvalidRequest` naming every bad group; all-or-nothing for lists."""
    errors: list[dict[str, Any]] = []
    for index, group in enumerate(groups):
        for problem in group_problems(group, rules):
            if in_list:
                problem["loc"] = ["body", index, *problem["loc"]]
                problem["msg"] = f"group {index}: {problem['msg']}"
            else:
                problem["loc"] = ["body", *problem["loc"]]
            errors.append(problem)
        if len(errors) >= MAX_ERRORS:
            break
    if errors:
        raise InvalidRequest(errors)
