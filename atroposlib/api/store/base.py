"""The store interface of the trajectory API's state: rows, snapshot, transaction, store.

The server keeps a small metadata mirror of its state in memory (:mod:`atroposlib.api.state`)
and writes every change through a :class:`Store` inside one transaction per request, committed
before the response is sent. Group data (each group's stored JSON) lives only in the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "BATCH_PENDING", "BATCH_SERVED", "LOC_BATCH", "LOC_BUFFER", "LOC_QUEUE", "LOC_RETIRED",
    "BatchRow", "GroupRow", "Snapshot", "Store", "StoreError", "Transaction",
]  # fmt: skip

LOC_QUEUE, LOC_BUFFER, LOC_BATCH, LOC_RETIRED = 0, 1, 2, 3
BATCH_PENDING, BATCH_SERVED = 0, 1


class StoreError(RuntimeError):
    """The store cannot be opened or used (bad data dir, locked, corrupt, newer schema)."""


@dataclass(slots=True)
class GroupRow:
    """Metadata of one stored group (everything but its data)."""

    gid: int
    env_id: int | None
    size: int
    nbytes: int
    loc: int
    qseq: int
    received_step: int
    received_at: float


@dataclass(slots=True)
class BatchRow:
    """One formed batch: its groups in batch order."""

    bid: int
    state: int
    pos: int
    served: int
    gids: list[int]


@dataclass
class Snapshot:
    """Everything a store holds except group data, as loaded at start-up."""

    meta: dict[str, Any] = field(default_factory=dict)
    hwm: dict[str, int] = field(default_factory=dict)
    envs: list[dict[str, Any]] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    batches: list[BatchRow] = field(default_factory=list)
    latest: bytes | None = None
    latest_qseq: int = 0


class Transaction(Protocol):
    """Write operations of one request; all applied together or none."""

    def add_group(self, row: GroupRow, data: bytes) -> None: ...
    def move_groups(self, gids: Iterable[int], loc: int, qseqs: Iterable[int] | None = None) -> None: ...
    def delete_groups(self, gids: Iterable[int]) -> None: ...
    def put_batch(self, batch: BatchRow) -> None: ...
    def delete_batch(self, bid: int) -> None: ...
    def put_env(self, env_id: int, record: dict[str, Any]) -> None: ...
    def put_meta(self, state: dict[str, Any]) -> None: ...
    def put_latest(self, data: bytes, qseq: int) -> None: ...
    def put_hwm(self, hwm: dict[str, int]) -> None: ...
    def reset(self, hwm: dict[str, int]) -> None: ...


class Store(Protocol):
    """Durable (or in-memory) home of the API's state."""

    kind: str
    #: True when :meth:`load` returns what was committed (the mirror can be rebuilt from it).
    durable: bool

    def load(self) -> Snapshot: ...
    def transaction(self) -> contextlib.AbstractContextManager[Transaction]: ...
    def read_groups(self, gids: Sequence[int]) -> list[bytes]: ...
    def read_group(self, gid: int) -> bytes | None: ...
    def close(self) -> None: ...
