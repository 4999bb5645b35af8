"""The state machine in-process, over both stores (no HTTP): the semantics behind every route."""

from __future__ import annotations

import orjson
import pytest

from atroposlib.api.decode import decode_group
from atroposlib.api.errors import InvalidRequest
from atroposlib.api.inspection import env_records, recent_groups
from atroposlib.api.records import NotRegistered, QueueFull, UnknownBatch, UnknownEnv
from atroposlib.api.schemas import RegisterEnv, Registration
from atroposlib.api.state import TrajectoryState
from atroposlib.api.store import MemoryStore, SqliteStore, StoreError


@pytest.fixture(params=["memory", "sqlite"])
def make_state(request, tmp_path):
    stores = []

    def make(**options):
        store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "db")
        stores.append(store)
        return TrajectoryState(store, **options)

    yield make
    for store in stores:
        store.close()


def reg(**overrides):
    values = dict(
        wandb_group="g",
        wandb_project="p",
        batch_size=4,
        max_token_len=64,
        checkpoint_dir="ck",
        save_checkpoint_interval=5,
        starting_step=0,
        num_steps=10,
    )
    values.update(overrides)
    return Registration(**values)


def grp(size, start=0, env_id=None, score=1.0):
    body = {
        "tokens": [[start + i] for i in range(size)],
        "masks": [[start + i] for i in range(size)],
        "scores": [score] * size,
        "env_id": env_id,
    }
    return decode_group(orjson.dumps(body))


def put(state, *groups):
    return state.ingest(list(groups))


def served_markers(served):
    return [g["tokens"][0][0] for g in orjson.loads(served.body)["batch"]]


def test_lifo_drain_and_step(make_state):
    state = make_state()
    state.register(reg(batch_size=4, starting_step=3))
    put(state, *(grp(2, 10 * i) for i in range(6)))
    assert [served_markers(state.next_batch()) for _ in range(3)] == [[40, 50], [20, 30], [0, 10]]
    assert state.meta.step == 6
    assert state.next_batch() is None


def test_not_registered(make_state):
    state = make_state()
    with pytest.raises(NotRegistered):
        state.next_batch()
    with pytest.raises(NotRegistered):
        state.status_env(0)
    assert state.disconnect_env(0)["status"] == "failure"


def test_register_is_weakly_idempotent(make_state):
    state = make_state()
    a, b = state.register(reg(batch_size=4)), state.register(reg(batch_size=8))
    assert a != b and a.bit_length() <= 128
    assert state.info() == {"batch_size": 4, "max_token_len": 64}


def test_register_env_requires_started_and_divisible_group_size(make_state):
    state = make_state()
    state.register(reg(batch_size=8))
    env = RegisterEnv(max_token_length=64, desired_name="e", weight=1.0, group_size=4)
    assert state.register_env(env) == {"status": "wait for trainer to start"}
    assert state.next_batch() is None  # starts the trainer
    assert state.register_env(env)["env_id"] == 0
    with pytest.raises(InvalidRequest):
        state.register_env(RegisterEnv(max_token_length=64, desired_name="e", weight=1.0, group_size=3))


def test_buffer_flush_keeps_fifo_items(make_state):
    state = make_state()
    state.register(reg(batch_size=4))
    state.next_batch()
    state.register_env(RegisterEnv(max_token_length=64, desired_name="e", weight=1.0, group_size=4))
    assert put(state, grp(1, 0, env_id=0)) == [{"status": "buffered", "buffer_size": 1}]
    assert put(state, grp(2, 10, env_id=0)) == [{"status": "buffered", "buffer_size": 3}]
    assert put(state, grp(1, 20, env_id=0)) == [{"status": "buffered", "buffer_size": 0}]
    assert [r.size for r in state.queue] == [1, 2, 1]
    assert orjson.loads(state.latest_example())["tokens"][0] == [20]


def test_capacity(make_state):
    state = make_state(max_queue_sequences=4, max_queue_bytes=0)
    state.register(reg(batch_size=2))
    put(state, grp(2), grp(2, 5))
    with pytest.raises(QueueFull):
        put(state, grp(2, 9))
    with pytest.raises(InvalidRequest):
        put(state, grp(2), grp(2), grp(2))
    state.next_batch()  # serves 2 of the 4 waiting sequences
    assert state.waiting_sequences == 2
    put(state, grp(2, 9))


def test_byte_capacity(make_state):
    state = make_state(max_queue_sequences=0, max_queue_bytes=700)
    state.register(reg(batch_size=1))
    put(state, grp(1), grp(1, 3))
    with pytest.raises(QueueFull):
        put(state, *(grp(1, 10 + i) for i in range(2)))


def test_ack_replay_and_unknown(make_state):
    state = make_state(max_unacked_batches=8)
    state.register(reg(batch_size=1))
    put(state, grp(1, 0), grp(1, 1), grp(1, 2))
    first, second, third = (state.next_batch() for _ in range(3))
    state.acknowledge(second.batch_id)
    with pytest.raises(UnknownBatch):
        state.acknowledge(second.batch_id)
    assert state.replay() == 2
    assert [served_markers(state.next_batch()) for _ in range(2)] == [[2], [0]]
    assert state.replay() == 2
    state.acknowledge(first.batch_id)  # acknowledging a requeued batch removes it
    assert served_markers(state.next_batch()) == [0]
    assert state.next_batch() is None
    assert first.batch_id > second.batch_id > third.batch_id  # formed together, served newest first


def test_inspection_window_and_latest_preservation(make_state):
    state = make_state(max_unacked_batches=0, inspect_history=3)
    state.register(reg(batch_size=1))
    for i in range(5):
        put(state, grp(1, i))
        state.next_batch()
    recent = orjson.loads(recent_groups(state, 10))
    assert [g["seq"] for g in recent["groups"]] == [5, 4, 3]
    assert len(state.groups) == 3  # older retired groups were collected
    for i in range(5, 9):
        put(state, grp(1, i))
        state.next_batch()
    state.reset()
    assert orjson.loads(state.latest_example())["tokens"] == [[8]]
    assert orjson.loads(recent_groups(state, 10))["groups"] == []


def test_reset_keeps_the_originals_survivors(make_state):
    state = make_state()
    state.register(reg(max_token_len=99, checkpoint_dir="keep"))
    state.reset()
    assert state.info() == {"batch_size": -1, "max_token_len": 99}
    assert state.meta.checkpoint_dir == "keep" and state.meta.save_checkpoint_interval == 5
    assert state.status() == {"current_step": 0, "queue_size": 0}
    assert state.wandb_info() == {"group": None, "project": None}


def test_status_env_errors(make_state):
    state = make_state()
    state.register(reg(batch_size=8))
    state.next_batch()
    with pytest.raises(UnknownEnv):
        state.status_env(0)


def test_min_allocation_batches(make_state):
    state = make_state()
    state.register(reg(batch_size=4))
    state.next_batch()
    for name, share in (("a", 0.5), ("b", None)):
        state.register_env(
            RegisterEnv(
                max_token_length=64, desired_name=name, weight=1.0, group_size=2, min_batch_allocation=share
            )
        )
    put(state, grp(2, 0, env_id=1), grp(2, 10, env_id=1), grp(2, 20, env_id=0))
    assert served_markers(state.next_batch()) == [20, 0]


def test_sqlite_reload_rebuilds_everything(tmp_path):
    store = SqliteStore(tmp_path / "db")
    state = TrajectoryState(store)
    state.register(reg(batch_size=2, starting_step=7))
    state.next_batch()
    state.register_env(RegisterEnv(max_token_length=64, desired_name="e", weight=2.0, group_size=2))
    put(state, grp(1, 0, env_id=0), grp(2, 10), grp(2, 20), grp(2, 30))
    served = state.next_batch()
    snapshot = (state.meta, state.health(), env_records(state), state.latest_example())
    store.close()
    reopened = TrajectoryState(SqliteStore(tmp_path / "db"))
    assert (reopened.meta, reopened.health(), env_records(reopened), reopened.latest_example()) == snapshot
    assert list(reopened.unacked) == [served.batch_id]
    assert reopened.next_group_id == state.next_group_id and reopened.next_batch_id == state.next_batch_id
    reopened.store.close()


def test_failed_commit_leaves_memory_equal_to_the_store(tmp_path):
    store = SqliteStore(tmp_path / "db")
    state = TrajectoryState(store)
    state.register(reg(batch_size=2))
    put(state, grp(2))
    original = store.transaction

    def failing():
        class Boom:
            def __enter__(self):
                self.cm = original()
                return self.cm.__enter__()

            def __exit__(self, *exc):
                self.cm.__exit__(RuntimeError, RuntimeError("disk full"), None)
                raise OSError("disk full")

        return Boom()

    store.transaction = failing
    with pytest.raises(OSError):
        put(state, grp(2, 5))
    store.transaction = original
    assert len(state.queue) == 1 and state.waiting_sequences == 2
    store.close()


def test_store_refuses_newer_schema_and_second_opener(tmp_path):
    first = SqliteStore(tmp_path / "db")
    with pytest.raises(StoreError, match="in use"):
        SqliteStore(tmp_path / "db")
    first._conn.execute("UPDATE meta SET value='999' WHERE key='schema'")
    first.close()
    with pytest.raises(StoreError, match="newer"):
        SqliteStore(tmp_path / "db")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _busy_and_hung(state):
    """A trainer with batches of 4, two envs each owed half of every batch, two groups of the first queued."""
    state.register(reg(batch_size=4))
    state.next_batch()
    for name in ("busy", "hung"):
        state.register_env(
            RegisterEnv(
                max_token_length=64, desired_name=name, weight=1.0, group_size=2, min_batch_allocation=0.5
            )
        )
    put(state, grp(2, 0, env_id=0), grp(2, 10, env_id=0))


def test_a_silent_env_loses_its_minimum_share_until_it_is_heard_from(make_state):
    clock = Clock()
    state = make_state(env_heartbeat_seconds=30, clock=clock)
    _busy_and_hung(state)
    assert state.next_batch() is None  # "hung" is owed half of every batch
    clock.now += 20
    state.status_env(0)  # "busy" polls; "hung" stays silent
    assert state.next_batch() is None  # still within the window
    clock.now += 15
    state.status_env(0)
    assert state.status_env(0)["env_weight"] == 1.0  # the silent env's weight went to the others
    assert served_markers(state.next_batch()) == [0, 10]
    state.status_env(1)  # heard from again: it is owed its share once more
    put(state, grp(2, 20, env_id=0), grp(2, 30, env_id=0))
    assert state.next_batch() is None
    assert state.status_env(1)["env_weight"] == 0.5


def test_no_heartbeat_window_keeps_every_connected_env(make_state):
    clock = Clock()
    state = make_state(clock=clock)
    _busy_and_hung(state)
    clock.now += 10_000
    assert state.next_batch() is None
