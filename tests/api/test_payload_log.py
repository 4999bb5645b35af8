"""Group payloads in append-only segment files: writing, reclaiming, damage, migration."""

from __future__ import annotations

import json
import os
import sqlite3
import threading

import orjson
import pytest
from fastapi.testclient import TestClient

from atroposlib.api.config import ApiConfig
from atroposlib.api.server import create_app
from atroposlib.api.state import TrajectoryState
from atroposlib.api.store import (
    DB_FILENAME,
    PAYLOAD_DIRNAME,
    SCHEMA_VERSION,
    BatchState,
    GroupLocation,
    SqliteStore,
)
from atroposlib.api.store.payload_log import PayloadError, PayloadLog
from tests.api.test_state import grp, put, reg, served_markers
from tests.helpers.api import registration

REGISTRATION = registration()


def test_append_read_and_crc(tmp_path):
    log = PayloadLog(tmp_path)
    first, second = log.append(b"alpha"), log.append(b"beta")
    assert (first.offset, second.offset) == (0, 5) and first.segment == second.segment
    log.settle([first.segment, second.segment], [], committed=True)
    assert log.read(second) == b"beta" and log.read(first) == b"alpha"
    log.path(first.segment).write_bytes(b"alphaXeta")
    with pytest.raises(PayloadError, match="damaged"):
        log.read(second)
    log.close()


def test_segments_rotate_and_are_deleted_once_unreferenced(tmp_path):
    log = PayloadLog(tmp_path, segment_bytes=10)
    extents = [log.append(b"x" * 6) for _ in range(4)]  # two per segment
    segments = sorted({e.segment for e in extents})
    assert len(segments) == 2 and log.segments() == segments
    log.settle([e.segment for e in extents], [], committed=True)
    log.settle([], [extents[0].segment, extents[1].segment], committed=True)
    assert log.segments() == segments[1:]  # the first one had no rows left
    log.settle([], [extents[2].segment, extents[3].segment], committed=True)
    assert log.segments() == segments[1:]  # the one being written stays
    log.close()


def test_a_segment_with_uncommitted_writes_is_kept(tmp_path):
    log = PayloadLog(tmp_path, segment_bytes=10)
    pending = log.append(b"y" * 12)  # fills the first segment
    later = log.append(b"z")  # rotates
    assert pending.segment in log.segments()
    log.settle([pending.segment, later.segment], [], committed=True)
    assert log.read(pending) == b"y" * 12
    log.close()


def test_rolled_back_writes_leave_no_references(tmp_path):
    log = PayloadLog(tmp_path, segment_bytes=4)
    extent = log.append(b"abcd")
    log.append(b"e")  # rotates away from the first segment
    log.settle([extent.segment], [], committed=False)
    assert extent.segment not in log.segments()
    log.close()


def test_store_keeps_payloads_outside_sqlite_and_reclaims_them(tmp_path):
    store = SqliteStore(tmp_path)
    store.log.segment_bytes = 1  # one segment per group
    state = TrajectoryState(store, inspect_history=0)
    state.register(reg(batch_size=2))
    put(state, grp(2, 10), grp(2, 20), grp(2, 30))
    columns = [r[1] for r in store._conn.execute("PRAGMA table_info(groups)")]
    assert {"seg", "off", "crc"} <= set(columns)
    assert store._conn.execute("SELECT name FROM sqlite_master WHERE name='group_data'").fetchone() is None
    payload_dir = tmp_path / PAYLOAD_DIRNAME
    assert len(list(payload_dir.iterdir())) == 3
    for marker in (30, 20):
        served = state.next_batch()
        assert served_markers(served) == [marker]
        state.acknowledge(served.batch_id)
    # 20's segment is gone; 10's is still queued and 30's is the one being written
    assert sorted(p.name for p in payload_dir.iterdir()) == ["0000000001.log", "0000000003.log"]
    state.reset()
    assert list(payload_dir.iterdir()) == []
    store.close()


def test_restart_drops_groups_whose_data_never_reached_the_disk(tmp_path):
    store = SqliteStore(tmp_path)
    state = TrajectoryState(store)
    state.register(reg(batch_size=4))
    put(state, grp(2, 10), grp(2, 20), grp(2, 30), grp(2, 40))
    state.next_batch()  # forms two batches: one served, one pending
    store.close()
    segment = next((tmp_path / PAYLOAD_DIRNAME).iterdir())
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2])  # a power loss kept only the first half
    reopened = TrajectoryState(SqliteStore(tmp_path))
    survivors = sorted(row.group_id for row in reopened.groups.values())
    assert survivors and len(survivors) < 4
    for batch in [*reopened.stack, *reopened.unacked.values()]:
        assert set(batch.group_ids) <= set(survivors)
    reopened.store.close()


def test_damaged_payload_fails_its_batch_with_503_and_changes_nothing(tmp_path):
    store = SqliteStore(tmp_path)
    state = TrajectoryState(store)
    state.register(reg(batch_size=2))
    put(state, grp(2, 10))
    segment = next((tmp_path / PAYLOAD_DIRNAME).iterdir())
    segment.write_bytes(b"#" * segment.stat().st_size)
    with pytest.raises(PayloadError):
        state.next_batch()
    assert len(state.queue) == 1 and not state.stack and not state.unacked
    store.close()


def test_damaged_payload_is_answered_503_over_http(tmp_path):
    config = ApiConfig(store="sqlite", data_dir=tmp_path, retry_after_seconds=3)
    with TestClient(create_app(config)) as client:
        client.post("/register", json=REGISTRATION | {"batch_size": 2})
        body = {"tokens": [[1, 2], [3, 4]], "masks": [[1, 2], [3, 4]], "scores": [1.0, 0.0]}
        assert client.post("/scored_data", json=body).json() == {"status": "received"}
        segment = next((tmp_path / PAYLOAD_DIRNAME).iterdir())
        segment.write_bytes(b"#" * segment.stat().st_size)
        answer = client.get("/batch")
        assert answer.status_code == 503 and "damaged" in answer.json()["detail"]
        assert answer.headers["Retry-After"] == "3"
        assert client.get("/health").json()["queue_groups"] == 1
        assert 'reason="storage_error"' in client.get("/metrics").text


def test_schema_1_data_dir_is_migrated(tmp_path):
    group = orjson.loads(grp(2, 70).data)
    conn = sqlite3.connect(tmp_path / DB_FILENAME, isolation_level=None)
    conn.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
        CREATE TABLE envs (env_id INTEGER PRIMARY KEY, record TEXT NOT NULL);
        CREATE TABLE groups (gid INTEGER PRIMARY KEY, env_id INTEGER, size INTEGER NOT NULL,
            nbytes INTEGER NOT NULL, loc INTEGER NOT NULL, qseq INTEGER NOT NULL,
            received_step INTEGER NOT NULL, received_at REAL NOT NULL);
        CREATE TABLE group_data (gid INTEGER PRIMARY KEY, data BLOB NOT NULL);
        CREATE TABLE batches (bid INTEGER PRIMARY KEY, state INTEGER NOT NULL, pos INTEGER NOT NULL,
            served INTEGER NOT NULL, gids TEXT NOT NULL);
        """
    )
    meta = {"registered": True, "batch_size": 2, "max_token_len": 64, "step": 3, "started": True}
    conn.execute("INSERT INTO meta VALUES ('schema', '1')")
    conn.execute("INSERT INTO meta VALUES ('state', ?)", (json.dumps(meta),))
    blob = orjson.dumps(group)
    conn.execute("INSERT INTO groups VALUES (1, NULL, 2, ?, 0, 1, 3, 0.0)", (len(blob),))
    conn.execute("INSERT INTO group_data VALUES (1, ?)", (blob,))
    conn.close()
    store = SqliteStore(tmp_path)
    assert store._conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == str(
        SCHEMA_VERSION
    )
    state = TrajectoryState(store)
    assert state.meta.step == 3
    assert served_markers(state.next_batch()) == [70]
    store.close()


def test_the_on_disk_layout_of_schema_2_is_kept(tmp_path):
    """A data dir written before the store's Python names changed must still resume: same columns,
    same location and state numbers, same high-water-mark keys."""
    state = TrajectoryState(SqliteStore(tmp_path), inspect_history=0)
    state.register(reg(batch_size=2))
    state.next_batch()  # starts the trainer
    put(state, grp(2, 10), grp(2, 20), grp(2, 30))
    first = state.next_batch()
    state.acknowledge(first.batch_id)  # retires and collects its groups: the marks are written
    state.store.close()
    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    columns = {
        table: [r[1] for r in conn.execute(f"PRAGMA table_info({table})")] for table in ("groups", "batches")
    }
    assert columns == {
        "groups": [
            "gid",
            "env_id",
            "size",
            "nbytes",
            "loc",
            "qseq",
            "received_step",
            "received_at",
            "seg",
            "off",
            "crc",
        ],
        "batches": ["bid", "state", "pos", "served", "gids"],
    }
    # Three one-group batches; the newest (group 3) was served, acknowledged and collected.
    assert conn.execute("SELECT gid, loc, qseq FROM groups ORDER BY gid").fetchall() == [(1, 2, 1), (2, 2, 2)]
    assert conn.execute("SELECT bid, state, gids FROM batches ORDER BY bid").fetchall() == [
        (1, 0, "[1]"),
        (2, 0, "[2]"),
    ]
    marks = json.loads(conn.execute("SELECT value FROM meta WHERE key='hwm'").fetchone()[0])
    assert marks == {"gid": 3, "bid": 3, "qseq": 3, "pos": 4}
    # Marks written by an earlier run decide the next ids after a restart.
    conn.execute(
        "UPDATE meta SET value=? WHERE key='hwm'", (json.dumps({"gid": 40, "bid": 9, "qseq": 50, "pos": 7}),)
    )
    conn.commit()
    conn.close()
    reopened = TrajectoryState(SqliteStore(tmp_path))
    assert reopened.groups[1].location is GroupLocation.BATCH
    assert [b.state for b in reopened.stack] == [BatchState.PENDING, BatchState.PENDING]
    assert (reopened.next_group_id, reopened.next_batch_id) == (41, 10)
    assert (reopened.next_queue_sequence, reopened.next_batch_position) == (51, 8)
    assert served_markers(reopened.next_batch()) == [20]
    reopened.store.close()


def test_full_synchronous_refuses_a_commit_it_cannot_flush(tmp_path, monkeypatch):
    store = SqliteStore(tmp_path, synchronous="full")
    state = TrajectoryState(store)
    state.register(reg(batch_size=2))
    put(state, grp(2, 10))

    def broken_flush(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("atroposlib.api.store.payload_log.os.fdatasync", broken_flush)
    with pytest.raises(PayloadError, match="cannot flush"):
        put(state, grp(2, 20))
    monkeypatch.undo()
    assert [row.group_id for row in state.queue] == [1]
    assert store._conn.execute("SELECT count(*) FROM groups").fetchone()[0] == 1
    assert served_markers(state.next_batch()) == [10]
    store.close()


_REAL_FDATASYNC = os.fdatasync


def flushed_paths(monkeypatch, fail: set[str] = frozenset()) -> list[str]:
    """Record the files os.fdatasync is called on; fail for names in ``fail``."""
    flushed: list[str] = []

    def record(fd):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).removesuffix(" (deleted)")
        if name in fail:
            raise OSError(5, "Input/output error")
        flushed.append(name)
        _REAL_FDATASYNC(fd)

    monkeypatch.setattr("atroposlib.api.store.payload_log.os.fdatasync", record)
    return flushed


def test_rotation_leaves_the_flush_to_the_next_sync_which_retries_failures(tmp_path, monkeypatch):
    log = PayloadLog(tmp_path, segment_bytes=4)
    first = log.append(b"one!")
    log.append(b"two!")  # rotates: no flush on the request path
    flushed = flushed_paths(monkeypatch, fail={log.path(first.segment).name})
    with pytest.raises(PayloadError, match="cannot flush"):
        log.sync()
    assert flushed == [log.path(first.segment + 1).name]  # the current one was still flushed
    flushed = flushed_paths(monkeypatch)
    log.sync()
    assert flushed == [log.path(first.segment).name, log.path(first.segment + 1).name]
    flushed.clear()
    log.sync()
    assert flushed == [log.path(first.segment + 1).name]  # the rotated one is done with
    log.close()


def test_appends_go_on_while_another_thread_waits_for_the_disk(tmp_path, monkeypatch):
    log = PayloadLog(tmp_path)
    log.append(b"before")
    entered, release = threading.Event(), threading.Event()

    def slow_flush(fd):
        entered.set()
        release.wait(30)

    monkeypatch.setattr("atroposlib.api.store.payload_log.os.fdatasync", slow_flush)
    syncer = threading.Thread(target=log.sync)
    syncer.start()
    extents = []
    appender = threading.Thread(target=lambda: extents.append(log.append(b"during")))
    try:
        assert entered.wait(30)
        appender.start()
        appender.join(10)
        assert not appender.is_alive(), "append waited for the flush of another thread"
    finally:
        release.set()
        syncer.join(30)
        appender.join(30)
    assert log.read(extents[0]) == b"during"
    log.close()


def test_a_flush_waits_for_one_in_progress_in_another_thread(tmp_path, monkeypatch):
    """A commit's flush (synchronous=full) must not return while the checkpointer is still
    flushing a segment that commit wrote to."""
    log = PayloadLog(tmp_path, segment_bytes=4)
    log.append(b"one!")
    log.append(b"two!")  # the first segment is rotated out, unflushed
    entered, release = threading.Event(), threading.Event()

    def slow_first_flush(fd):
        if not entered.is_set():
            entered.set()
            release.wait(30)
        _REAL_FDATASYNC(fd)

    monkeypatch.setattr("atroposlib.api.store.payload_log.os.fdatasync", slow_first_flush)
    checkpointer = threading.Thread(target=log.sync)
    checkpointer.start()
    committer = threading.Thread(target=log.sync)
    try:
        assert entered.wait(30)
        committer.start()
        committer.join(0.5)
        assert committer.is_alive(), "a flush returned while another was still writing"
    finally:
        release.set()
        checkpointer.join(30)
        committer.join(30)
    log.close()
