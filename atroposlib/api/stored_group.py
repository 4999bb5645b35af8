"""The stored form of a queued group, and the JSON it is served as.

A group is stored in one of three forms, told apart by the first byte:

- its compact JSON: the 14-key object (:data:`~atroposlib.api.schemas.GROUP_FIELDS` order) that
  ``/batch``, ``/latest_example`` and ``/inspect/recent`` return; it starts with ``{``;
- parts (first byte ``0x02``), written by :mod:`atroposlib.api.simd_decode` so that ingest never
  turns a token or a logprob into a Python object: the msgpack array of the group's JSON cut into
  parts, each either a piece of JSON text (msgpack bin) or a matrix
  ``[kind, row_lengths, values]`` whose values are little-endian int32 (kind 0: ``tokens``,
  ``masks``, each sequence of ``distill_token_ids``) or float64 (kind 1: ``advantages``,
  ``ref_logprobs``, ``inference_logprobs``, each sequence of ``distill_logprobs``), back to back;
- packed (first byte ``0x01``), the earlier form of the same idea, still read: the msgpack array
  ``[token_lengths, token_int32s, mask_lengths, mask_int32s, rest_json]``.

:func:`group_json` renders any form as the exact bytes of the JSON form (the matrices by orjson from
the arrays), so what a client reads does not depend on how a group was decoded, and data
directories written by earlier versions are served unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import msgspec
import numpy as np
import orjson

PACKED = b"\x01"
PARTS = b"\x02"
INT32_ROWS = 0
FLOAT64_ROWS = 1

#: ``(kind, row_lengths, values)``: a list of rows of numbers.
Matrix = tuple[int, list[int], bytes]
#: A piece of JSON text, or a matrix.
Part = bytes | Matrix

_DTYPES = {INT32_ROWS: np.dtype("<i4"), FLOAT64_ROWS: np.dtype("<f8")}
_NATIVE = sys.byteorder == "little"
_PACKED_FRAME = msgspec.msgpack.Decoder(tuple[list[int], bytes, list[int], bytes, bytes])
_PARTS_FRAME = msgspec.msgpack.Decoder(list[Part])
_MSGPACK = msgspec.msgpack.Encoder()


class CorruptGroup(ValueError):
    """Stored bytes that are none of the forms (a damaged data directory)."""


def is_packed(blob: bytes) -> bool:
    """Whether ``blob`` is one of the binary forms (written by the simdjson decoder)."""
    return blob[:1] in (PACKED, PARTS)


def pack(parts: Sequence[Part]) -> bytes:
    """The parts form of a group whose JSON is ``parts`` joined (matrices rendered)."""
    return PARTS + _MSGPACK.encode(parts)


def group_json(blob: bytes) -> bytes:
    """The group's compact JSON, whichever form ``blob`` is in.

    Raises :class:`CorruptGroup` for binary forms that do not decode.
    """
    if not is_packed(blob):
        return blob
    try:
        if blob[:1] == PARTS:
            parts = _PARTS_FRAME.decode(memoryview(blob)[1:])
        else:
            token_lengths, tokens, mask_lengths, masks, rest = _PACKED_FRAME.decode(memoryview(blob)[1:])
            parts = [
                b'{"tokens":',
                (INT32_ROWS, token_lengths, tokens),
                b',"masks":',
                (INT32_ROWS, mask_lengths, masks),
                b"," + rest[1:],
            ]
        return b"".join(part if isinstance(part, bytes) else _matrix_json(*part) for part in parts)
    except (msgspec.MsgspecError, ValueError, KeyError) as exc:
        raise CorruptGroup(f"stored group does not decode: {exc!r}") from None


def _matrix_json(kind: int, lengths: list[int], data: bytes) -> bytes:
    flat = np.frombuffer(data, _DTYPES[kind])
    if sum(lengths) != flat.size:
        raise ValueError(f"row lengths add up to {sum(lengths)}, but {flat.size} values are stored")
    if not _NATIVE:
        flat = flat.astype(flat.dtype.newbyteorder("="))  # orjson serializes native-endian arrays only
    if lengths and lengths.count(lengths[0]) == len(lengths):
        rows = flat.reshape(len(lengths), lengths[0])  # one array, not a slice per row
    else:
        rows = []
        start = 0
        for length in lengths:
            rows.append(flat[start : start + length])
            start += length
    text = orjson.dumps(rows, option=orjson.OPT_SERIALIZE_NUMPY)
    if kind == FLOAT64_ROWS:
        # Both write a float's shortest round-trip digits, switching to an exponent at the same
        # magnitudes; orjson writes a positive exponent as "e+16", msgspec (which writes the
        # groups stored as JSON) as "e16". Nothing else in an array of numbers holds "e+".
        text = text.replace(b"e+", b"e")
    return text
