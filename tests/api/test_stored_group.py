"""The stored form of a group: matrices kept as numbers, rendered as the group's exact JSON."""

from __future__ import annotations

import struct

import msgspec
import numpy as np
import orjson
import pytest

from atroposlib.api.fastpath import error_outcome
from atroposlib.api.memory_store import MemoryStore
from atroposlib.api.metrics import ApiMetrics
from atroposlib.api.state import TrajectoryState
from atroposlib.api.store import STORAGE_ERRORS
from atroposlib.api.stored_group import (
    FLOAT64_ROWS,
    INT32_ROWS,
    PACKED,
    PARTS,
    CorruptGroup,
    group_json,
    is_packed,
    pack,
)
from atroposlib.api.strict_schema import StrictGroup, StrictRest
from atroposlib.api.validation import Group
from tests.api.test_state import reg

REST = msgspec.json.encode(StrictRest(scores=[1.0, 0.5], env_id=2, images=["x"]))


def int32s(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def float64s(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def rows(kind: int, matrix: list[list]) -> tuple[int, list[int], bytes]:
    flat = [v for row in matrix for v in row]
    return kind, [len(row) for row in matrix], (int32s if kind == INT32_ROWS else float64s)(flat)


def legacy(token_lengths, tokens, mask_lengths, masks, rest) -> bytes:
    """The first packed form (marker 0x01), which data directories may still hold."""
    return PACKED + msgspec.msgpack.encode((token_lengths, tokens, mask_lengths, masks, rest))


def test_parts_render_as_the_groups_compact_json():
    tokens = [[1, 2147483647, -2147483648], [], [7]]
    masks = [[-100, 5, 6], [], [0]]
    logprobs = [[-0.0, 5e-324, 1.7976931348623157e308, -1e-7, 0.1, 1e16], []]
    want = StrictGroup(tokens=tokens, masks=masks, scores=[1.0, 0.5], inference_logprobs=logprobs, env_id=2)
    text = msgspec.json.encode(want)
    head, tail = text.split(b'"inference_logprobs":')
    tail = tail[tail.index(b"]],") + 2 :]
    blob = pack(
        [
            b'{"tokens":',
            rows(INT32_ROWS, tokens),
            b',"masks":',
            rows(INT32_ROWS, masks),
            head[head.index(b',"scores"') :] + b'"inference_logprobs":',
            rows(FLOAT64_ROWS, logprobs),
            tail,
        ]
    )
    assert blob[:1] == PARTS and is_packed(blob)
    assert group_json(blob) == text
    assert group_json(pack([b'{"tokens":', rows(INT32_ROWS, []), b"}"])) == b'{"tokens":[]}'


def test_floats_render_as_msgspec_writes_them():
    """Every finite double (random bit patterns, powers of 2 and 10) as the JSON form holds it."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 2**64 - 1, size=200_000, dtype=np.uint64).view(np.float64)
    special = np.concatenate([2.0 ** np.arange(-1074, 1024), 10.0 ** np.arange(-323, 309), [0.0, -0.0, 1e15]])
    values = np.concatenate([values[np.isfinite(values)], special, -special])
    matrix = [values[:1000].tolist(), [], values[1000:].tolist()]
    blob = pack([b"[", rows(FLOAT64_ROWS, matrix), b"]"])
    assert group_json(blob) == b"[" + msgspec.json.encode(matrix) + b"]"


@pytest.mark.parametrize("width", [0, 1, 5])
def test_rows_of_one_length_render_as_any_rows(width):
    """Rows of one length are written from one 2-D array; the text is the same as row by row."""
    ints = [[i * 7 - 2**31 + j for j in range(width)] for i in range(4)]
    floats = [[-0.5 * i - j * 1e-9 for j in range(width)] for i in range(4)]
    for kind, matrix in ((INT32_ROWS, ints), (FLOAT64_ROWS, floats)):
        assert group_json(pack([b"[", rows(kind, matrix), b"]"])) == b"[" + msgspec.json.encode(matrix) + b"]"
    with pytest.raises(CorruptGroup):
        group_json(pack([(INT32_ROWS, [width + 1] * 4, int32s([v for row in ints for v in row]))]))


def test_the_first_packed_form_is_still_read():
    tokens = [[1, 2147483647, -2147483648], [], [7]]
    masks = [[-100, 5, 6], [], [0]]
    _, token_lengths, token_values = rows(INT32_ROWS, tokens)
    _, mask_lengths, mask_values = rows(INT32_ROWS, masks)
    blob = legacy(token_lengths, token_values, mask_lengths, mask_values, REST)
    assert is_packed(blob)
    rendered = group_json(blob)
    assert rendered.startswith(b'{"tokens":[[1,2147483647,-2147483648],[],[7]],"masks":[[-100,5,6],[],[0]],')
    assert orjson.loads(rendered) == {"tokens": tokens, "masks": masks, **orjson.loads(REST)}


def test_json_groups_are_served_as_stored():
    blob = b'{"tokens":[[1]],"masks":[[1]],"scores":[1.0]}'
    assert group_json(blob) is blob
    assert not is_packed(blob)


@pytest.mark.parametrize(
    "blob",
    [
        PACKED + b"\xff\x00",
        PACKED,
        PARTS,
        PARTS + b"\x92\x01",
        legacy([2], int32s([1]), [1], int32s([1]), REST),  # lengths promise more than is stored
        legacy([1], b"\x01\x00", [1], int32s([1]), REST),  # not whole int32s
        pack([b"{", (INT32_ROWS, [2], int32s([1]))]),
        pack([b"{", (FLOAT64_ROWS, [1], b"\x00" * 4)]),  # not whole float64s
        pack([b"{", (7, [1], int32s([1]))]),  # an unknown kind of matrix
    ],
)
def test_damaged_packed_groups_are_a_storage_error(blob):
    with pytest.raises(CorruptGroup):
        group_json(blob)


def test_a_damaged_group_fails_its_batch_with_503_and_changes_nothing():
    state = TrajectoryState(MemoryStore())
    state.register(reg(batch_size=1))
    state.ingest([Group([1], [1], [1.0], None, PACKED + b"junk")])
    with pytest.raises(CorruptGroup) as caught:
        state.next_batch()
    assert isinstance(caught.value, STORAGE_ERRORS)
    assert error_outcome(caught.value, ApiMetrics(lambda: state), retry_after=3).status == 503
    assert len(state.queue) == 1 and not state.stack
