"""The stored form of a group: packed int32 matrices rendered as the group's exact JSON."""

from __future__ import annotations

import struct

import msgspec
import orjson
import pytest

from atroposlib.api.fastpath import error_outcome
from atroposlib.api.memory_store import MemoryStore
from atroposlib.api.metrics import ApiMetrics
from atroposlib.api.state import TrajectoryState
from atroposlib.api.store import STORAGE_ERRORS
from atroposlib.api.stored_group import PACKED, CorruptGroup, group_json, pack
from atroposlib.api.strict_schema import StrictRest
from atroposlib.api.validation import Group
from tests.api.test_state import reg

REST = msgspec.json.encode(StrictRest(scores=[1.0, 0.5], env_id=2, images=["x"]))


def int32s(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def test_packed_groups_render_as_their_compact_json():
    tokens = [[1, 2147483647, -2147483648], [], [7]]
    masks = [[-100, 5, 6], [], [0]]
    blob = pack(
        [len(r) for r in tokens],
        int32s([v for r in tokens for v in r]),
        [len(r) for r in masks],
        int32s([v for r in masks for v in r]),
        REST,
    )
    assert blob[:1] == PACKED
    rendered = group_json(blob)
    assert rendered.startswith(b'{"tokens":[[1,2147483647,-2147483648],[],[7]],"masks":[[-100,5,6],[],[0]],')
    assert orjson.loads(rendered) == {"tokens": tokens, "masks": masks, **orjson.loads(REST)}
    assert group_json(pack([], b"", [], b"", REST)).startswith(b'{"tokens":[],"masks":[],"scores"')


def test_json_groups_are_served_as_stored():
    blob = b'{"tokens":[[1]],"masks":[[1]],"scores":[1.0]}'
    assert group_json(blob) is blob


@pytest.mark.parametrize(
    "blob",
    [
        PACKED + b"\xff\x00",
        PACKED,
        pack([2], int32s([1]), [1], int32s([1]), REST),  # lengths promise more than is stored
        pack([1], b"\x01\x00", [1], int32s([1]), REST),  # not whole int32s
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
