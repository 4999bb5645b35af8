"""Persistence of the trajectory API's state: the store interface and its SQLite implementation.

The server keeps a small metadata mirror of its state in memory (:mod:`atroposlib.api.state`)
and writes every change through a store inside one transaction per request, committed before
the response is sent. Group data (the stored JSON of each group) lives only in the store, so
memory use does not grow with queued tokens.

SQLite layout (one file, ``<data_dir>/trajectory_api.sqlite3``, WAL mode):

- ``meta(key, value)``: JSON documents: ``state`` (registration and counters), ``hwm`` (id
  high-water marks kept across resets), ``latest`` (copy of the latest group once its row is
  gone), ``schema``.
- ``envs(env_id, record)``: env registry, record as JSON.
- ``groups(gid, env_id, size, nbytes, loc, qseq, received_step, received_at)``: every group not
  yet discarded; ``loc`` says where it is (queue, buffer, batch, retired), ``qseq`` is its
  position in the order groups entered the queue.
- ``group_data(gid, data)``: the stored JSON of each group, written once and never updated
  (kept apart so that moving a group rewrites a small row, not its data).
- ``batches(bid, state, pos, served, gids)``: formed batches, pending (``state=0``, a stack
  ordered by ``pos``) or served and unacknowledged (``state=1``, ordered by ``pos``).

With ``synchronous=NORMAL`` a committed transaction survives a crash of the process (``kill
-9``); ``synchronous=FULL`` also survives power loss. WAL checkpoints run in a background
thread so that the request path never waits for them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

SCHEMA_VERSION = 1
DB_FILENAME = "trajectory_api.sqlite3"
LOCK_FILENAME = "run-api.lock"

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


# ---------------------------------------------------------------------------------- SQLite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS envs (env_id INTEGER PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS groups (
    gid INTEGER PRIMARY KEY,
    env_id INTEGER,
    size INTEGER NOT NULL,
    nbytes INTEGER NOT NULL,
    loc INTEGER NOT NULL,
    qseq INTEGER NOT NULL,
    received_step INTEGER NOT NULL,
    received_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS group_data (gid INTEGER PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    bid INTEGER PRIMARY KEY,
    state INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    served INTEGER NOT NULL,
    gids TEXT NOT NULL
);
"""


class _SqliteTransaction:
    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def add_group(self, row: GroupRow, data: bytes) -> None:
        self._conn.execute(
            "INSERT INTO groups VALUES (?,?,?,?,?,?,?,?)",
            (
                row.gid,
                row.env_id,
                row.size,
                row.nbytes,
                row.loc,
                row.qseq,
                row.received_step,
                row.received_at,
            ),
        )
        self._conn.execute("INSERT INTO group_data VALUES (?,?)", (row.gid, data))

    def move_groups(self, gids: Iterable[int], loc: int, qseqs: Iterable[int] | None = None) -> None:
        if qseqs is None:
            self._conn.executemany("UPDATE groups SET loc=? WHERE gid=?", [(loc, g) for g in gids])
        else:
            self._conn.executemany(
                "UPDATE groups SET loc=?, qseq=? WHERE gid=?",
                [(loc, q, g) for g, q in zip(gids, qseqs, strict=True)],
            )

    def delete_groups(self, gids: Iterable[int]) -> None:
        keys = [(g,) for g in gids]
        self._conn.executemany("DELETE FROM groups WHERE gid=?", keys)
        self._conn.executemany("DELETE FROM group_data WHERE gid=?", keys)

    def put_batch(self, batch: BatchRow) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO batches VALUES (?,?,?,?,?)",
            (batch.bid, batch.state, batch.pos, batch.served, json.dumps(batch.gids)),
        )

    def delete_batch(self, bid: int) -> None:
        self._conn.execute("DELETE FROM batches WHERE bid=?", (bid,))

    def put_env(self, env_id: int, record: dict[str, Any]) -> None:
        self._conn.execute("INSERT OR REPLACE INTO envs VALUES (?,?)", (env_id, json.dumps(record)))

    def put_meta(self, state: dict[str, Any]) -> None:
        self._put("state", json.dumps(state))

    def put_latest(self, data: bytes, qseq: int) -> None:
        self._put("latest", data)
        self._put("latest_qseq", str(qseq))

    def reset(self, hwm: dict[str, int]) -> None:
        self._conn.execute("DELETE FROM groups")
        self._conn.execute("DELETE FROM group_data")
        self._conn.execute("DELETE FROM batches")
        self._conn.execute("DELETE FROM envs")
        self._put("hwm", json.dumps(hwm))

    def _put(self, key: str, value: Any) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (key, value))


class SqliteStore:
    """The durable store: one SQLite database in WAL mode under ``data_dir``.

    Holds an exclusive lock file for its lifetime, so two servers never share a data dir.
    Raises :class:`StoreError` when the directory cannot be used.
    """

    kind = "sqlite"
    durable = True

    def __init__(self, data_dir: Path, *, synchronous: str = "normal", checkpoint_interval: float = 1.0):
        self.data_dir = Path(data_dir)
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data dir {self.data_dir}: {exc.strerror or exc}") from None
        self._lock_fd = self._acquire_lock()
        self.path = self.data_dir / DB_FILENAME
        try:
            self._conn = self._connect(synchronous)
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            self._release_lock()
            raise StoreError(f"cannot open {self.path}: {exc}") from None
        self._stop = threading.Event()
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, args=(checkpoint_interval,), name="sqlite-checkpoint", daemon=True
        )
        self._checkpointer.start()

    # ---------------------------------------------------------------- lifecycle

    def _acquire_lock(self) -> int:
        lock_path = self.data_dir / LOCK_FILENAME
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot use data dir {self.data_dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreError(
                f"data dir {self.data_dir} is in use by another run-api (pid {holder}); "
                "stop it or choose another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None

    def _connect(self, synchronous: str) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'full' else 'NORMAL'}")
        # Checkpoints run in the background thread, never inside a request's commit.
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("PRAGMA journal_size_limit=67108864")
        conn.execute("PRAGMA cache_size=-4096")  # 4 MiB page cache bounds resident memory
        return conn

    def _init_schema(self) -> None:
        row = None
        with contextlib.suppress(sqlite3.OperationalError):
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is not None and int(row[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer atroposlib (schema {row[0]} > {SCHEMA_VERSION})"
            )
        self._conn.executescript(_SCHEMA)
        self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

    def _checkpoint_loop(self, interval: float) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error:
            return
        try:
            while not self._stop.wait(interval):
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the checkpointer, fold the WAL into the database and release the lock."""
        self._stop.set()
        self._checkpointer.join(timeout=5)
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._release_lock()

    # ---------------------------------------------------------------- reads

    def load(self) -> Snapshot:
        conn = self._conn
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        snap = Snapshot()
        snap.meta = json.loads(meta["state"]) if "state" in meta else {}
        snap.hwm = json.loads(meta["hwm"]) if "hwm" in meta else {}
        snap.latest = bytes(meta["latest"]) if "latest" in meta else None
        snap.latest_qseq = int(meta.get("latest_qseq", 0) or 0)
        snap.envs = [json.loads(r[0]) for r in conn.execute("SELECT record FROM envs ORDER BY env_id")]
        snap.groups = [
            GroupRow(*r)
            for r in conn.execute(
                "SELECT gid, env_id, size, nbytes, loc, qseq, received_step, received_at FROM groups ORDER BY gid"
            )
        ]
        snap.batches = [
            BatchRow(bid, state, pos, served, json.loads(gids))
            for bid, state, pos, served, gids in conn.execute(
                "SELECT bid, state, pos, served, gids FROM batches ORDER BY pos"
            )
        ]
        return snap

    def read_groups(self, gids: Sequence[int]) -> list[bytes]:
        """Stored JSON of the given groups, in the given order (KeyError if one is missing)."""
        found: dict[int, bytes] = {}
        for start in range(0, len(gids), 500):
            chunk = gids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(
                self._conn.execute(f"SELECT gid, data FROM group_data WHERE gid IN ({marks})", chunk)
            )
        return [found[g] for g in gids]

    def read_group(self, gid: int) -> bytes | None:
        row = self._conn.execute("SELECT data FROM group_data WHERE gid=?", (gid,)).fetchone()
        return None if row is None else row[0]

    # ---------------------------------------------------------------- writes

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_SqliteTransaction]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield _SqliteTransaction(self._conn)
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")
