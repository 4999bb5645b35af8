"""The store interface of the trajectory API's state: rows, snapshot, transaction, store.

The server keeps a small metadata mirror of its state in memory (:mod:`atroposlib.api.state`)
and writes every change through a :class:`Store` inside one transaction per request, committed
before the response is sent. Group data (each group's stored JSON) lives only in the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

__all__ = [
    "BatchRow", "BatchState", "GroupLocation", "GroupRow", "HighWaterMarks", "Snapshot", "Store", "StoreError",
    "Transaction",
]  # fmt: skip


class GroupLocation(IntEnum):
    """Where a stored group is; the values are what the store writes."""

    QUEUE = 0  #: waiting to be batched
    BUFFER = 1  #: held until its env's smaller groups add up to the env's group size
    BATCH = 2  #: in a formed batch (pending or served, not yet acknowledged)
    RETIRED = 3  #: its batch is done; kept for ``/inspect/recent`` until collected


class BatchState(IntEnum):
    """Whether a formed batch waits to be served or was served and awaits its acknowledgement."""

    PENDING = 0
    SERVED = 1


class StoreError(RuntimeError):
    """The store cannot be opened or used (bad data dir, locked, corrupt, newer schema)."""


@dataclass(slots=True)
class GroupRow:
    """Metadata of one stored group (everything but its data)."""

    group_id: int
    env_id: int | None
    size: int  #: sequences in the group
    nbytes: int  #: length of its stored JSON
    location: GroupLocation
    #: Place in the order groups entered the queue (0 while buffered, never reused).
    queue_sequence: int
    received_step: int
    received_at: float


@dataclass(slots=True)
class BatchRow:
    """One formed batch: its groups in batch order."""

    batch_id: int
    state: BatchState
    #: Order among batches: pending ones are a stack served from the highest position, served ones
    #: are replayed from the lowest.
    position: int
    served: int  #: how many times it was served
    group_ids: list[int]


@dataclass
class HighWaterMarks:
    """The highest id of each kind handed out so far; stored so that no id is reused after a restart."""

    group_id: int = 0  #: the newest group's id
    batch_id: int = 0  #: the newest batch's id
    queue_sequence: int = 0  #: the queue sequence of the group that entered the queue last
    batch_position: int = 0  #: the highest position a batch was given


@dataclass
class Snapshot:
    """Everything a store holds except group data, as loaded at start-up."""

    meta: dict[str, Any] = field(default_factory=dict)
    high_water_marks: HighWaterMarks = field(default_factory=HighWaterMarks)
    envs: list[dict[str, Any]] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    batches: list[BatchRow] = field(default_factory=list)
    latest: bytes | None = None  #: the latest group's data, copied when its row was deleted
    latest_queue_sequence: int = 0  #: the queue sequence of that copy


class Transaction(Protocol):
    """Write operations of one request; all applied together or none."""

    def add_group(self, row: GroupRow, data: bytes) -> None: ...
    def move_groups(
        self, group_ids: Iterable[int], location: GroupLocation, queue_sequences: Iterable[int] | None = None
    ) -> None: ...
    def delete_groups(self, group_ids: Iterable[int]) -> None: ...
    def put_batch(self, batch: BatchRow) -> None: ...
    def delete_batch(self, batch_id: int) -> None: ...
    def put_env(self, env_id: int, record: dict[str, Any]) -> None: ...
    def put_meta(self, state: dict[str, Any]) -> None: ...
    def put_latest(self, data: bytes, queue_sequence: int) -> None: ...
    def put_high_water_marks(self, marks: HighWaterMarks) -> None: ...
    def reset(self, marks: HighWaterMarks) -> None: ...


class Store(Protocol):
    """Durable (or in-memory) home of the API's state."""

    kind: str
    #: True when :meth:`load` returns what was committed (the mirror can be rebuilt from it).
    durable: bool

    def load(self) -> Snapshot: ...
    def transaction(self) -> contextlib.AbstractContextManager[Transaction]: ...
    def read_groups(self, group_ids: Sequence[int]) -> list[bytes]: ...
    def read_group(self, group_id: int) -> bytes | None: ...
    def close(self) -> None: ...
