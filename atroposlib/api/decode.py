"""Decoding scored groups: request body -> checked :class:`Group` with its stored form.

One path for every body: msgspec decodes it into the typed group structure built from the field
table of :mod:`atroposlib.group` (floats finite, unknown fields dropped, a repeated key: the last
one counts). The int matrices (``tokens``, ``masks``) come out of that decode as their JSON text,
which :func:`int32_matrix` checks in a few passes over the bytes (rows of int32 values) and
compacts, so no Python int is made per token. :func:`atroposlib.group.check_group` then applies
the content rules. The stored form is the group's compact JSON with every field of the table in
order (missing optionals ``null``): what ``/batch``, ``/latest_example`` and ``/inspect/recent``
return.

When the typed decode fails, the pydantic model of :mod:`atroposlib.api.schemas` decides: it
phrases the 422 errors, and it accepts lax coercions (``1.0`` or ``"2"`` for an int; compat:
atroposlib 0.4.0 clients send them), whose values are then checked and stored the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
import numpy as np
from pydantic import TypeAdapter, ValidationError

from atroposlib.api.errors import InvalidRequest, pydantic_errors, require_body
from atroposlib.api.schemas import ScoredData
from atroposlib.group import API, API_TYPED, FIELDS, INT32_MAX, INT32_MIN, Kind, Problem, check_group

Int32 = Annotated[int, msgspec.Meta(ge=INT32_MIN, le=INT32_MAX)]
_TYPED_KINDS = {
    # Kept as their JSON text and checked by _int32_matrix: no Python int per value.
    Kind.INT_MATRIX: msgspec.Raw,
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

#: Fields decoded as JSON text (:data:`Kind.INT_MATRIX`), checked by :func:`int32_matrix`.
_INT_MATRICES = tuple(f.name for f in FIELDS if f.kind is Kind.INT_MATRIX)

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
    return _decode_groups(body, many=False)[0]


def decode_group_list(body: bytes) -> list[Group]:
    """The groups of a ``POST /scored_data_list`` body (a JSON array of groups)."""
    return _decode_groups(body, many=True)


def _decode_groups(body: bytes, *, many: bool) -> list[Group]:
    """The typed decode of one group (``many=False``) or a list of groups. Where it cannot accept the body
    (a schema error, or a value that only the lax coercions accept), pydantic decides and phrases
    the 422."""
    require_body(body)
    try:
        typed = _MANY.decode(body) if many else [_ONE.decode(body)]
    except _TYPED_DECODE_ERRORS:
        typed = None
    if typed is not None and all(_messages_complete(g.messages) for g in typed):
        groups = [_typed_group(g) for g in typed]
        if None not in groups:
            return groups
    try:
        models = _GROUP_LIST.validate_json(body) if many else [ScoredData.model_validate_json(body)]
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
    """Whether every message has ``role`` and ``content`` (pydantic phrases a failure)."""
    if messages is None:
        return True
    return all("role" in m and "content" in m for conversation in messages for m in conversation)


def _typed_group(typed: Any) -> Group | None:
    """The group of a typed decode, or ``None`` when an int matrix is not a list of int32 rows."""
    values = msgspec.structs.asdict(typed)
    for name in _INT_MATRICES:
        raw = values[name]
        if raw is None:
            continue
        checked = int32_matrix(bytes(raw))
        if checked is None:
            return None
        text, lengths = checked
        setattr(typed, name, msgspec.Raw(text))
        # check_group reads only the lengths of rows a typed decode has checked (API_TYPED).
        values[name] = [range(n) for n in lengths]
    problems = check_group(values, API_TYPED)
    token_lengths = [len(row) for row in values["tokens"]]
    return Group(token_lengths, typed.scores, typed.env_id, _ENCODER.encode(typed), problems)


def _lax_group(values: dict[str, Any]) -> Group:
    problems = check_group(values, API)
    try:
        data = _ENCODER.encode(values)
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError) as exc:
        data = b""
        problems.append(Problem("unencodable", (), f"the group cannot be stored as JSON: {exc}"))
    return Group([len(row) for row in values["tokens"]], values["scores"], values["env_id"], data, problems)


_WHITESPACE = b" \t\n\r"
#: In valid JSON, any value but an integer or an array needs one of these characters.
_NOT_INTEGERS = (b'"', b"{", b".", b"e", b"E", b"t", b"f", b"n")
_COMMA, _MINUS, _ZERO = (ord(c) for c in ",-0")


def int32_matrix(raw: bytes) -> tuple[bytes, list[int]] | None:
    """Check the JSON text of an int matrix without making a Python int of each value.

    ``raw`` must be valid JSON (the typed decode has parsed it). When it is a list of lists of
    int32 values, returns its compact text (no whitespace, ``-0`` written ``0``: what encoding the
    values gives) and the length of each row; otherwise ``None`` (floats, strings, nested arrays,
    a value beside the rows, a number out of range), and the caller leaves the body to the
    pydantic model.
    """
    if b" " in raw or b"\n" in raw or b"\r" in raw or b"\t" in raw:
        raw = raw.translate(None, _WHITESPACE)
    if any(char in raw for char in _NOT_INTEGERS):
        return None
    if raw == b"[]":
        return raw, []
    if not (raw.startswith(b"[[") and raw.endswith(b"]]")):
        return None
    text = np.frombuffer(raw, np.uint8)
    commas = text == _COMMA
    # Walk the rows: the text must read "[[" row ("],[" row)* "]]" with no bracket inside a row.
    rows: list[tuple[int, int]] = []
    last = len(raw) - 2
    start = 1
    while True:
        end = raw.find(b"]", start)
        if raw.find(b"[", start + 1, end) != -1:
            return None
        rows.append((start + 1, end))
        if end == last:
            break
        if raw[end + 1 : end + 3] != b",[":
            return None
        start = end + 2
    lengths = [int(np.count_nonzero(commas[a:b])) + 1 if b > a else 0 for a, b in rows]
    # A number of 10 or more digits may be out of range: those are checked exactly. Digits and
    # brackets are the characters from "0" up, so a run of ten may also be a long number next to
    # "[" or "]", which the exact check then accepts.
    digits = text >= _ZERO
    runs = digits[:-1] & digits[1:]  # two digits in a row
    runs = runs[:-2] & runs[2:]  # four
    runs = runs[:-4] & runs[4:]  # eight
    runs = runs[:-2] & runs[2:]  # ten
    if runs.any():
        for a, b in rows:
            for number in raw[a:b].split(b",") if b > a else ():
                if len(number) > 11 or not INT32_MIN <= int(number) <= INT32_MAX:
                    return None
    minus = text[:-1] == _MINUS
    if minus.any() and (minus & (text[1:] == _ZERO)).any():
        raw = raw.replace(b"-0", b"0")  # valid JSON has no other number that starts "-0"
    return raw, lengths
