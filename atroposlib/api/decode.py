"""Decoding scored groups: request body -> checked :class:`Group` with its stored form.

One path for every body: msgspec decodes it into the typed group structure built from the field
table of :mod:`atroposlib.group` (token and mask rows as int32 values, floats finite, unknown
fields dropped, a repeated key: the last one counts), then :func:`atroposlib.group.check_group`
applies the content rules. The stored form is the group's compact JSON with every field of the
table in order (missing optionals ``null``): what ``/batch``, ``/latest_example`` and
``/inspect/recent`` return.

When the typed decode fails, the pydantic model of :mod:`atroposlib.api.schemas` decides: it
phrases the 422 errors, and it accepts lax coercions (compat: the original accepted ``1.0`` or
``"2"`` for an int), whose values are then checked and stored the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
from pydantic import TypeAdapter, ValidationError

from atroposlib.api.errors import InvalidRequest, pydantic_errors, require_body
from atroposlib.api.schemas import ScoredData
from atroposlib.group import API, API_TYPED, FIELDS, INT32_MAX, INT32_MIN, Kind, Problem, check_group

Int32 = Annotated[int, msgspec.Meta(ge=INT32_MIN, le=INT32_MAX)]
_TYPED_KINDS = {
    Kind.INT_MATRIX: list[list[Int32]],
    Kind.INT_CUBE: list[list[list[Int32]]],
    Kind.FLOAT_MATRIX: list[list[float]],
    Kind.FLOAT_CUBE: list[list[list[float]]],
    Kind.FLOATS: list[float],
    Kind.INT: int,
}


def _struct_field(name: str, kind: Kind, wire_type: Any, required: bool) -> tuple[Any, ...]:
    typed = _TYPED_KINDS.get(kind, wire_type)
    return (name, typed) if required else (name, typed | None, None)


#: The typed structure of a scored group (fields in stored order).
GroupStruct = msgspec.defstruct(
    "GroupStruct", [_struct_field(f.name, f.kind, f.wire_type, f.required) for f in FIELDS]
)

_ONE = msgspec.json.Decoder(GroupStruct)
_MANY = msgspec.json.Decoder(list[GroupStruct])
_GROUP_LIST = TypeAdapter(list[ScoredData])
_ENCODER = msgspec.json.Encoder()
_TYPED_DECODE_ERRORS = (msgspec.MsgspecError, RecursionError, ValueError)


@dataclass(slots=True)
class Group:
    """A decoded group: its stored form and what admission and metrics need.

    ``problems`` are the content problems :func:`~atroposlib.group.check_group` found (locations
    relative to the group); a group with problems is never queued.
    """

    token_lengths: list[int]
    scores: list[float]
    env_id: int | None
    data: bytes
    problems: list[Problem] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Number of sequences."""
        return len(self.token_lengths)


def decode_group(body: bytes) -> Group:
    """The group of a ``POST /scored_data`` body; raises :class:`InvalidRequest` for a schema error."""
    require_body(body)
    try:
        typed = _ONE.decode(body)
    except _TYPED_DECODE_ERRORS:
        typed = None
    if typed is not None and _messages_complete(typed.messages):
        return _typed_group(typed)
    try:
        model = ScoredData.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequest(pydantic_errors(exc, body)) from None
    return _lax_group(model.to_group())


def decode_group_list(body: bytes) -> list[Group]:
    """The groups of a ``POST /scored_data_list`` body (a JSON array of groups)."""
    require_body(body)
    try:
        typed = _MANY.decode(body)
    except _TYPED_DECODE_ERRORS:
        typed = None
    if typed is not None and all(_messages_complete(g.messages) for g in typed):
        return [_typed_group(g) for g in typed]
    try:
        models = _GROUP_LIST.validate_json(body)
    except ValidationError as exc:
        raise InvalidRequest(pydantic_errors(exc, body)) from None
    return [_lax_group(m.to_group()) for m in models]


def decode_model(model: type, body: bytes) -> Any:
    """Parse and validate a small JSON body into the pydantic ``model`` (raises :class:`InvalidRequest`)."""
    require_body(body)
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequest(pydantic_errors(exc, body)) from None


def _messages_complete(messages: list[list[dict[str, Any]]] | None) -> bool:
    """Whether every message has ``role`` and ``content`` (compat: the original's rule; pydantic phrases a failure)."""
    if messages is None:
        return True
    return all("role" in m and "content" in m for conversation in messages for m in conversation)


def _typed_group(typed: Any) -> Group:
    problems = check_group(msgspec.structs.asdict(typed), API_TYPED)
    return Group(
        [len(row) for row in typed.tokens], typed.scores, typed.env_id, _ENCODER.encode(typed), problems
    )


def _lax_group(values: dict[str, Any]) -> Group:
    problems = check_group(values, API)
    try:
        data = _ENCODER.encode(values)
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError) as exc:
        data = b""
        problems.append(Problem("unencodable", (), f"the group cannot be stored as JSON: {exc}"))
    return Group([len(row) for row in values["tokens"]], values["scores"], values["env_id"], data, problems)
