"""The in-memory store (``--store memory``): nothing survives exit.

Implements the same interface as :class:`atroposlib.api.store.SqliteStore`; group data is kept
as its stored JSON (bytes) rather than as Python objects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from atroposlib.api.store.base import BatchRow, GroupLocation, GroupRow, HighWaterMarks, Snapshot


class _MemoryTransaction:
    def __init__(self, store: MemoryStore):
        self._store = store

    def add_group(self, row: GroupRow, data: bytes) -> None:
        self._store._data[row.group_id] = data

    def move_groups(
        self, group_ids: Iterable[int], location: GroupLocation, queue_sequences: Iterable[int] | None = None
    ) -> None:
        """Locations live in the state mirror only; nothing to record here."""

    def delete_groups(self, group_ids: Iterable[int]) -> None:
        for group_id in group_ids:
            self._store._data.pop(group_id, None)

    def put_batch(self, batch: BatchRow) -> None:
        """Batches live in the state mirror only."""

    def delete_batch(self, batch_id: int) -> None:
        """Batches live in the state mirror only."""

    def put_env(self, env_id: int, record: dict[str, Any]) -> None:
        """Envs live in the state mirror only."""

    def put_meta(self, state: dict[str, Any]) -> None:
        """Meta lives in the state mirror only."""

    def put_latest(self, data: bytes, queue_sequence: int) -> None:
        """The latest group's copy lives in the state mirror only."""

    def put_high_water_marks(self, marks: HighWaterMarks) -> None:
        """Nothing survives a restart: ids cannot be reused by a later run."""

    def reset(self, marks: HighWaterMarks) -> None:
        self._store._data.clear()


class MemoryStore:
    """Keeps group data in a dict; everything else lives in the state mirror."""

    kind = "memory"
    durable = False

    def __init__(self) -> None:
        self._data: dict[int, bytes] = {}

    def load(self) -> Snapshot:
        return Snapshot()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_MemoryTransaction]:
        yield _MemoryTransaction(self)

    def read_groups(self, group_ids: Sequence[int]) -> list[bytes]:
        return [self._data[group_id] for group_id in group_ids]

    def read_group(self, group_id: int) -> bytes | None:
        return self._data.get(group_id)

    def close(self) -> None:
        self._data.clear()
