"""The stored form of a queued group, and the JSON it is served as.

A group is stored in one of two forms, told apart by the first byte:

- its compact JSON: the 14-key object (:data:`~atroposlib.api.schemas.GROUP_FIELDS` order) that
  ``/batch``, ``/latest_example`` and ``/inspect/recent`` return; it starts with ``{``;
- packed (first byte ``0x01``), written by :mod:`atroposlib.api.simd_decode` so that ingest never
  turns a token into a Python int: ``tokens`` and ``masks`` as little-endian int32 arrays with
  their row lengths, and the other twelve fields as their compact JSON object. The bytes after
  the marker are the msgpack array
  ``[token_lengths, token_int32s, mask_lengths, mask_int32s, rest_json]``.

:func:`group_json` renders either form as the exact bytes of the JSON form, so what a client
reads does not depend on how a group was decoded, and data directories written before the
packed form existed are served unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import msgspec
import numpy as np
import orjson

PACKED = b"\x01"
_INT32_LE = np.dtype("<i4")
_NATIVE = sys.byteorder == "little"
_FRAME = msgspec.msgpack.Decoder(tuple[list[int], bytes, list[int], bytes, bytes])
_ENCODER = msgspec.msgpack.Encoder()


class CorruptGroup(ValueError):
    """Stored bytes that are neither form (a damaged data directory)."""


def pack(
    token_lengths: Sequence[int], tokens: bytes, mask_lengths: Sequence[int], masks: bytes, rest_json: bytes
) -> bytes:
    """The packed form. ``tokens``/``masks`` are the rows' int32 values (little-endian) back to back;
    ``rest_json`` is the compact JSON object of the fields after ``masks``, in stored order."""
    return PACKED + _ENCODER.encode((token_lengths, tokens, mask_lengths, masks, rest_json))


def group_json(blob: bytes) -> bytes:
    """The group's compact JSON, whichever form ``blob`` is in.

    Raises :class:`CorruptGroup` for packed bytes that do not decode.
    """
    if blob[:1] != PACKED:
        return blob
    try:
        token_lengths, tokens, mask_lengths, masks, rest = _FRAME.decode(memoryview(blob)[1:])
        return b"".join(
            (
                b'{"tokens":',
                _matrix_json(token_lengths, tokens),
                b',"masks":',
                _matrix_json(mask_lengths, masks),
                b",",
                rest[1:],
            )
        )
    except (msgspec.MsgspecError, ValueError) as exc:
        raise CorruptGroup(f"stored group does not decode: {exc}") from None


def _matrix_json(lengths: list[int], data: bytes) -> bytes:
    flat = np.frombuffer(data, _INT32_LE)
    if sum(lengths) != flat.size:
        raise ValueError(f"row lengths add up to {sum(lengths)}, but {flat.size} values are stored")
    if not _NATIVE:
        flat = flat.astype(np.int32)  # orjson serializes native-endian arrays only
    rows = []
    start = 0
    for length in lengths:
        rows.append(flat[start : start + length])
        start += length
    return orjson.dumps(rows, option=orjson.OPT_SERIALIZE_NUMPY)
