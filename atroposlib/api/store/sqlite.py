"""The durable store of the trajectory API's state: SQLite plus a payload log of group data.

Group data (each group's stored JSON) lives only here, so the server's memory does not grow
with queued tokens.

SQLite layout (one file, ``<data_dir>/trajectory_api.sqlite3``, WAL mode):

- ``meta(key, value)``: JSON documents: ``state`` (registration and counters), ``hwm`` (the
  :class:`~atroposlib.api.store.base.HighWaterMarks`, written whenever rows are deleted, so that no
  id is reused after a restart or a reset), ``latest`` and ``latest_qseq`` (copy of the latest group
  once its row is gone, and its queue sequence), ``schema``.
- ``envs(env_id, record)``: env registry, record as JSON.
- ``groups(gid, env_id, size, nbytes, loc, qseq, received_step, received_at, seg, off, crc)``:
  every group not yet discarded (a :class:`~atroposlib.api.store.base.GroupRow`); ``loc`` is its
  :class:`~atroposlib.api.store.base.GroupLocation`, ``qseq`` its queue sequence, and
  ``seg``/``off``/``nbytes``/``crc`` locate its stored JSON in the payload log
  (``<data_dir>/payloads/``, see :mod:`atroposlib.api.store.payload_log`), written before the row
  commits.
- ``batches(bid, state, pos, served, gids)``: formed batches (a
  :class:`~atroposlib.api.store.base.BatchRow`: batch id, :class:`~atroposlib.api.store.base.BatchState`,
  position, times served, group ids as a JSON list).

compat: the short column names and ``hwm`` keys (``gid``, ``bid``, ``qseq``, ``pos``) are the
on-disk format of schema 2; keeping them lets a run started by an earlier atroposlib resume.

With ``synchronous=NORMAL`` a committed transaction survives a crash of the process (``kill
-9``); ``synchronous=FULL`` also survives power loss (payloads are flushed before each commit).
WAL checkpoints run in a background thread so that the request path never waits for them; the
payload segment being written is flushed before each checkpoint.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from atroposlib.api.store.base import (
    BatchRow,
    BatchState,
    GroupLocation,
    GroupRow,
    HighWaterMarks,
    Snapshot,
    StoreError,
)
from atroposlib.api.store.payload_log import Extent, PayloadError, PayloadLog

SCHEMA_VERSION = 2
DB_FILENAME = "trajectory_api.sqlite3"
PAYLOAD_DIRNAME = "payloads"
LOCK_FILENAME = "run-api.lock"
#: What a failing store raises during a request (answered 503, nothing changed).
STORAGE_ERRORS = (sqlite3.Error, PayloadError)
#: Most ``?`` parameters put in one ``gid IN (...)`` query.
_IN_CHUNK = 500

logger = logging.getLogger("atroposlib.api")

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
    received_at REAL NOT NULL,
    seg INTEGER,
    off INTEGER,
    crc INTEGER
);
CREATE TABLE IF NOT EXISTS batches (
    bid INTEGER PRIMARY KEY,
    state INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    served INTEGER NOT NULL,
    gids TEXT NOT NULL
);
"""


#: :class:`HighWaterMarks` fields and their keys in the stored ``hwm`` document.
_MARK_KEYS = {"group_id": "gid", "batch_id": "bid", "queue_sequence": "qseq", "batch_position": "pos"}


def _dump_marks(marks: HighWaterMarks) -> str:
    return json.dumps({key: getattr(marks, name) for name, key in _MARK_KEYS.items()})


def _load_marks(stored: dict[str, int]) -> HighWaterMarks:
    return HighWaterMarks(**{name: int(stored.get(key, 0)) for name, key in _MARK_KEYS.items()})


def _in_chunks(group_ids: Sequence[int]) -> Iterator[tuple[Sequence[int], str]]:
    """``group_ids`` in slices small enough for one query, each with its ``?,?,...`` placeholders."""
    for start in range(0, len(group_ids), _IN_CHUNK):
        chunk = group_ids[start : start + _IN_CHUNK]
        yield chunk, ",".join("?" * len(chunk))


def _batch_row(bid: int, state: int, pos: int, served: int, gids: str) -> BatchRow:
    """A ``batches`` row (``SELECT *``, column order of the table) as a :class:`BatchRow`."""
    return BatchRow(bid, BatchState(state), pos, served, json.loads(gids))


class _SqliteTransaction:
    def __init__(self, conn: sqlite3.Connection, log: PayloadLog):
        self._conn = conn
        self._log = log
        #: Segments written into / released by this transaction, one entry per group.
        self.appended: list[int] = []
        self.dropped: list[int] = []
        self.cleared = False

    def add_group(self, row: GroupRow, data: bytes) -> None:
        extent = self._log.append(data)
        self.appended.append(extent.segment)
        self._conn.execute(
            "INSERT INTO groups VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                row.group_id,
                row.env_id,
                row.size,
                extent.length,
                int(row.location),
                row.queue_sequence,
                row.received_step,
                row.received_at,
                extent.segment,
                extent.offset,
                extent.crc,
            ),
        )

    def move_groups(
        self, group_ids: Iterable[int], location: GroupLocation, queue_sequences: Iterable[int] | None = None
    ) -> None:
        loc = int(location)
        if queue_sequences is None:
            self._conn.executemany("UPDATE groups SET loc=? WHERE gid=?", [(loc, g) for g in group_ids])
        else:
            self._conn.executemany(
                "UPDATE groups SET loc=?, qseq=? WHERE gid=?",
                [(loc, q, g) for g, q in zip(group_ids, queue_sequences, strict=True)],
            )

    def delete_groups(self, group_ids: Iterable[int]) -> None:
        for chunk, marks in _in_chunks(list(group_ids)):
            self.dropped.extend(
                seg for (seg,) in self._conn.execute(f"SELECT seg FROM groups WHERE gid IN ({marks})", chunk)
            )
            self._conn.execute(f"DELETE FROM groups WHERE gid IN ({marks})", chunk)

    def put_batch(self, batch: BatchRow) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO batches VALUES (?,?,?,?,?)",
            (batch.batch_id, int(batch.state), batch.position, batch.served, json.dumps(batch.group_ids)),
        )

    def delete_batch(self, batch_id: int) -> None:
        self._conn.execute("DELETE FROM batches WHERE bid=?", (batch_id,))

    def put_env(self, env_id: int, record: dict[str, Any]) -> None:
        self._conn.execute("INSERT OR REPLACE INTO envs VALUES (?,?)", (env_id, json.dumps(record)))

    def put_meta(self, state: dict[str, Any]) -> None:
        self._put("state", json.dumps(state))

    def put_latest(self, data: bytes, queue_sequence: int) -> None:
        self._put("latest", data)
        self._put("latest_qseq", str(queue_sequence))

    def put_high_water_marks(self, marks: HighWaterMarks) -> None:
        self._put("hwm", _dump_marks(marks))

    def reset(self, marks: HighWaterMarks) -> None:
        self._conn.execute("DELETE FROM groups")
        self._conn.execute("DELETE FROM batches")
        self._conn.execute("DELETE FROM envs")
        self._put("hwm", _dump_marks(marks))
        self.cleared = True

    def _put(self, key: str, value: Any) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (key, value))


class SqliteStore:
    """The durable store: one SQLite database in WAL mode plus a payload log under ``data_dir``.

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
            self.log = PayloadLog(self.data_dir / PAYLOAD_DIRNAME, fsync=synchronous == "full")
            self._conn = self._connect(synchronous)
            self._init_schema()
        except (sqlite3.DatabaseError, PayloadError) as exc:
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
        if row is not None and int(row[0]) < SCHEMA_VERSION:
            self._migrate(int(row[0]))
        self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

    def _migrate(self, version: int) -> None:
        """Schema 1 kept group data in a ``group_data`` table: move it into the payload log."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for column in ("seg", "off", "crc"):
                conn.execute(f"ALTER TABLE groups ADD COLUMN {column} INTEGER")
            moved = []
            for group_id, data in conn.execute("SELECT gid, data FROM group_data").fetchall():
                extent = self.log.append(bytes(data))
                moved.append(extent.segment)
                conn.execute(
                    "UPDATE groups SET seg=?, off=?, nbytes=?, crc=? WHERE gid=?",
                    (extent.segment, extent.offset, extent.length, extent.crc, group_id),
                )
            conn.execute("DROP TABLE group_data")
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            self.log.sync()
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        logger.info("moved the data of %d groups from schema %d to the payload log", len(moved), version)

    def _checkpoint_loop(self, interval: float) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error:
            return
        try:
            while not self._stop.wait(interval):
                # Payloads reach the disk before the rows that point to them are checkpointed.
                try:
                    self.log.sync()
                except PayloadError as exc:
                    logger.error("%s; WAL checkpoint postponed", exc)
                    continue
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the checkpointer, fold the WAL into the database and release the lock."""
        self._stop.set()
        self._checkpointer.join(timeout=5)
        with contextlib.suppress(PayloadError):
            self.log.sync()  # before the final checkpoint makes the rows pointing at it permanent
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self.log.close()
        self._release_lock()

    # ---------------------------------------------------------------- reads

    def load(self) -> Snapshot:
        conn = self._conn
        self._drop_lost_groups()
        self.log.set_references(
            dict(
                conn.execute("SELECT seg, count(*) FROM groups WHERE seg IS NOT NULL GROUP BY seg").fetchall()
            )
        )
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        snap = Snapshot()
        snap.meta = json.loads(meta["state"]) if "state" in meta else {}
        snap.high_water_marks = _load_marks(json.loads(meta["hwm"]) if "hwm" in meta else {})
        snap.latest = bytes(meta["latest"]) if "latest" in meta else None
        snap.latest_queue_sequence = int(meta.get("latest_qseq", 0) or 0)
        snap.envs = [json.loads(r[0]) for r in conn.execute("SELECT record FROM envs ORDER BY env_id")]
        snap.groups = [
            GroupRow(group_id, env_id, size, nbytes, GroupLocation(loc), qseq, step, at)
            for group_id, env_id, size, nbytes, loc, qseq, step, at in conn.execute(
                "SELECT gid, env_id, size, nbytes, loc, qseq, received_step, received_at FROM groups ORDER BY gid"
            )
        ]
        snap.batches = [_batch_row(*r) for r in conn.execute("SELECT * FROM batches ORDER BY pos")]
        return snap

    def _drop_lost_groups(self) -> None:
        """Forget groups whose data did not reach the disk (possible only after a power loss
        under ``synchronous=NORMAL``): the rows would point past the end of their segment."""
        sizes: dict[int, int] = {}
        lost = []
        for group_id, seg, off, nbytes in self._conn.execute("SELECT gid, seg, off, nbytes FROM groups"):
            if seg not in sizes:
                sizes[seg] = -1 if seg is None else self.log.size(seg)
            if off is None or off + nbytes > sizes[seg]:
                lost.append(group_id)
        if not lost:
            return
        logger.error(
            "%d queued groups lost their data in an unclean shutdown of the machine and are dropped",
            len(lost),
        )
        gone = set(lost)
        with self.transaction() as tx:
            tx.delete_groups(lost)
            for batch in [_batch_row(*r) for r in self._conn.execute("SELECT * FROM batches")]:
                kept = [g for g in batch.group_ids if g not in gone]
                if not kept:
                    tx.delete_batch(batch.batch_id)
                elif len(kept) != len(batch.group_ids):
                    batch.group_ids = kept
                    tx.put_batch(batch)

    def _extents(self, group_ids: Sequence[int]) -> dict[int, Extent]:
        found: dict[int, Extent] = {}
        for chunk, marks in _in_chunks(group_ids):
            for group_id, seg, off, nbytes, crc in self._conn.execute(
                f"SELECT gid, seg, off, nbytes, crc FROM groups WHERE gid IN ({marks})", chunk
            ):
                found[group_id] = Extent(seg, off, nbytes, crc)
        return found

    def read_groups(self, group_ids: Sequence[int]) -> list[bytes]:
        """Stored forms of the given groups, in the given order.

        Raises KeyError if one is unknown, :class:`PayloadError` if its data is damaged.
        """
        extents = self._extents(group_ids)
        return [self.log.read(extents[g]) for g in group_ids]

    def read_group(self, group_id: int) -> bytes | None:
        extent = self._extents([group_id]).get(group_id)
        return None if extent is None else self.log.read(extent)

    # ---------------------------------------------------------------- writes

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_SqliteTransaction]:
        self._conn.execute("BEGIN IMMEDIATE")
        tx = _SqliteTransaction(self._conn, self.log)
        try:
            yield tx
            if tx.appended and self.log.fsync:
                self.log.sync()
            self._conn.execute("COMMIT")
        except BaseException:
            self.log.settle(tx.appended, tx.dropped, committed=False)
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        if tx.cleared:
            self.log.clear()
        else:
            self.log.settle(tx.appended, tx.dropped, committed=True)
