"""Decoding plainly well-formed scored groups with simdjson, without a Python int per token.

Decoding a group with msgspec creates a Python int for every token id and mask value (8192 of
them for 8 sequences of 512 tokens) and formats each again to store the group: about 0.25 ms, the
largest part of an ingest request. Here simdjson parses the body in C++, each token row is
copied into an int64 buffer, numpy checks the int32 range of all of them at once, and the group
is stored packed (:mod:`atroposlib.api.stored_group`): the ints are formatted only when a batch
is served, by orjson from the int32 arrays.

Only plainly well-formed bodies are decoded here. For anything else (bad JSON, a wrong type, a
value out of range, a duplicate key, an escaped ``[``...) these functions return ``None`` and the
caller's exact path (:func:`atroposlib.api.validation.decode_group`) decides, so acceptance, the
stored values and error details never depend on which path decoded a body. The fields after
``masks`` are checked with the same msgspec types as that path (:class:`StrictRest`).

simdjson flattens nested arrays when it copies a row, so ``[1, [2]]`` would read as ``[1, 2]``.
Counting ``[`` bytes catches it: when the body has no ``\\u005b`` escape, every ``[`` in it opens
an array or is a character of a string, and both are counted from the decoded document; a
nested array in a token row is a ``[`` more than that count.
"""

from __future__ import annotations

import re
import threading
from typing import Any, NamedTuple

import msgspec
import numpy as np
import simdjson

from atroposlib.api.stored_group import pack
from atroposlib.api.strict_schema import INT32_MAX, INT32_MIN, StrictRest, messages_complete

_MATRICES = ("tokens", "masks")
_FLOAT_MATRICES = frozenset({"advantages", "ref_logprobs", "inference_logprobs"})
_CUBES = frozenset({"distill_token_ids", "distill_logprobs"})
_ESCAPED_BRACKET = re.compile(rb"\\u005[bB]")
_WHITESPACE = b" \t\r\n"
_OPEN_BRACKET = ord("[")
_ENCODER = msgspec.json.Encoder()
#: Bodies up to this size are parsed by a parser kept per thread: a fresh parser allocates (and the
#: allocator hands back to the system) buffers several times the body's size on every request,
#: which doubled the kernel time of an ingest request. A parser keeps buffers for the largest body
#: it has seen, about 8 MiB for 1 MiB; larger bodies get a parser of their own, freed afterwards.
REUSE_PARSER_MAX_BYTES = 1024 * 1024
_local = threading.local()


class PlainGroup(NamedTuple):
    """A decoded group; the fields of :class:`atroposlib.api.validation.Group`, in its order."""

    token_lengths: list[int]
    mask_lengths: list[int]
    scores: list[float]
    env_id: int | None
    data: bytes


class _NotPlain(Exception):
    """The body is not plainly well-formed; the exact path decides."""


#: What simdjson, msgspec and numpy raise for input the exact path has to look at.
_DECLINED = (_NotPlain, TypeError, ValueError, RuntimeError, KeyError, RecursionError, msgspec.MsgspecError)


def decode_one(body: bytes) -> PlainGroup | None:
    """The group of a ``POST /scored_data`` body, or ``None`` to leave it to the exact path."""
    groups = _decode(body, many=False)
    return groups[0] if groups else None


def decode_many(body: bytes) -> list[PlainGroup] | None:
    """The groups of a ``POST /scored_data_list`` body, or ``None`` to leave it to the exact path."""
    return _decode(body, many=True)


def _decode(body: bytes, *, many: bool) -> list[PlainGroup] | None:
    if body.lstrip(_WHITESPACE)[:1] != (b"[" if many else b"{"):
        return None
    if b"\\" in body and _ESCAPED_BRACKET.search(body):
        return None
    try:
        doc = _parser(len(body)).parse(body)
    except RuntimeError:
        # Also raised while a document of this parser is still referenced (it never should be):
        # the next body gets a new parser either way.
        _local.parser = None
        return None
    except _DECLINED:
        return None
    try:
        if many:
            if not isinstance(doc, simdjson.Array):
                return None
            groups, arrays = [], 1
            for item in doc:
                group, count = _group(item)
                groups.append(group)
                arrays += count
        else:
            group, arrays = _group(doc)
            groups = [group]
    except _DECLINED:
        return None
    if np.count_nonzero(np.frombuffer(body, np.uint8) == _OPEN_BRACKET) != arrays:
        return None
    return groups


def _parser(size: int) -> simdjson.Parser:
    if size > REUSE_PARSER_MAX_BYTES:
        return simdjson.Parser()
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = simdjson.Parser()
    return parser


def _group(obj: Any) -> tuple[PlainGroup, int]:
    """One group object, and how many ``[`` its JSON text holds if it is plain."""
    if not isinstance(obj, simdjson.Object):
        raise _NotPlain
    keys = list(obj.keys())
    if len(set(keys)) != len(keys):
        raise _NotPlain  # which duplicate counts is the exact path's call
    token_lengths, tokens, token_arrays = _matrix(obj.get("tokens"))
    mask_lengths, masks, mask_arrays = _matrix(obj.get("masks"))
    rest = {key: _python(obj[key]) for key in keys if key not in _MATRICES}
    typed = msgspec.convert(rest, StrictRest)
    if not messages_complete(typed.messages):
        raise _NotPlain
    arrays = token_arrays + mask_arrays + sum(key.count("[") for key in keys) + _rest_arrays(rest)
    data = pack(token_lengths, tokens, mask_lengths, masks, _ENCODER.encode(typed))
    return PlainGroup(token_lengths, mask_lengths, typed.scores, typed.env_id, data), arrays


def _matrix(value: Any) -> tuple[list[int], bytes, int]:
    """Row lengths, little-endian int32 values and array count of a list of int32 lists."""
    if not isinstance(value, simdjson.Array):
        raise _NotPlain
    flat = np.frombuffer(value.as_buffer(of_type="i"), np.int64)  # TypeError unless all int64
    lengths = [len(row) for row in value]  # TypeError for a row that is a bare number
    if flat.size != sum(lengths):
        raise _NotPlain  # a nested array of other than one item
    if flat.size and (flat.min() < INT32_MIN or flat.max() > INT32_MAX):
        raise _NotPlain
    return lengths, flat.astype("<i4").tobytes(), 1 + len(lengths)


def _python(value: Any) -> Any:
    if isinstance(value, simdjson.Array):
        return value.as_list()
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    return value


def _rest_arrays(rest: dict[str, Any]) -> int:
    """``[`` count of the fields after the matrices (already checked against :class:`StrictRest`).

    The typed numeric fields are counted from their shape, which the check guarantees, rather than
    walked value by value: ``inference_logprobs`` alone can hold thousands of floats.
    """
    total = 0
    for key, value in rest.items():
        if value is None:
            continue
        if key == "scores":
            total += 1
        elif key in _FLOAT_MATRICES:
            total += 1 + len(value)
        elif key in _CUBES:
            total += 1 + len(value) + sum(len(matrix) for matrix in value)
        else:
            total += _arrays(value)
    return total


def _arrays(value: Any) -> int:
    """``[`` count of any decoded JSON value: its arrays and the ``[`` in its strings."""
    if isinstance(value, list):
        return 1 + sum(_arrays(item) for item in value)
    if isinstance(value, dict):
        return sum(key.count("[") + _arrays(item) for key, item in value.items())
    if isinstance(value, str):
        return value.count("[")
    return 0
