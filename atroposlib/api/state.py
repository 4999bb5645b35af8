"""The trajectory API's state machine: registration, env registry, queue, buffers and batches.

:class:`TrajectoryState` implements every endpoint's semantics over a metadata mirror held in
memory, and writes every change through a :class:`~atroposlib.api.store.Store` in one
transaction per call. Group data never enters the mirror: it is read from the store when a batch
is served.

The methods are synchronous and must be called from one thread (the event loop): a call never
interleaves with another, so each request is atomic.

- ``/register`` initialises a server that is not registered, also when groups arrived first;
  those groups are kept (see CONFIG.md, "Trajectory API").
- ``/batch`` after ``/reset_data`` answers like ``/batch`` before registration.
- Served batches are remembered until acknowledged (``/batch/ack``) so ``/batch/replay`` can
  serve them again; only the newest ``max_unacked_batches`` are kept.
"""

from __future__ import annotations

import heapq
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import msgspec

from atroposlib.api.admission import AdmissionRules
from atroposlib.api.backlog import env_status
from atroposlib.api.decode import Group
from atroposlib.api.errors import InvalidRequest, error
from atroposlib.api.packing import drain_batches, minimum_allocations, subset_summing_to
from atroposlib.api.records import (
    EMPTY_LATEST_EXAMPLE,
    NOT_REGISTERED_MESSAGE,
    Counters,
    EnvRecord,
    EnvStats,
    NotRegistered,
    QueueFull,
    RunMeta,
    ServedBatch,
    UnknownBatch,
    UnknownEnv,
)
from atroposlib.api.responses import dumps
from atroposlib.api.schemas import RegisterEnv, Registration
from atroposlib.api.store import (
    BatchRow,
    BatchState,
    GroupLocation,
    GroupRow,
    HighWaterMarks,
    Store,
    Transaction,
)


class TrajectoryState:
    """All state of one API server; every public method is one atomic, committed operation."""

    def __init__(
        self,
        store: Store,
        *,
        max_queue_sequences: int = 0,
        max_queue_bytes: int = 0,
        max_unacked_batches: int = 64,
        inspect_history: int = 256,
        env_heartbeat_seconds: float = 0.0,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.max_queue_sequences = max_queue_sequences
        self.max_queue_bytes = max_queue_bytes
        self.max_unacked_batches = max_unacked_batches
        self.inspect_history = inspect_history
        self.env_heartbeat_seconds = env_heartbeat_seconds
        self.clock = clock
        self.counters = Counters()
        self._load()

    # ------------------------------------------------------------------ loading

    def _load(self) -> None:
        snap = self.store.load()
        self.meta = RunMeta.from_dict(snap.meta)
        self.envs = [EnvRecord(**record) for record in snap.envs]
        # When each env was last heard from (memory only: a status poll costs no write). A restarted API
        # gives every environment a full heartbeat window to poll again.
        self._opened_at = self.clock()
        self._last_heard: dict[int, float] = {}
        self.groups: dict[int, GroupRow] = {}
        self.queue: list[GroupRow] = []
        self.buffers: dict[int, list[GroupRow]] = {}
        self.stack: list[BatchRow] = []
        self.unacked: OrderedDict[int, BatchRow] = OrderedDict()
        self.retired: list[int] = []
        self.waiting_sequences = 0
        self.waiting_bytes = 0
        latest_row: GroupRow | None = None
        for row in snap.groups:
            self.groups[row.group_id] = row
            if row.location == GroupLocation.QUEUE:
                self.queue.append(row)
            elif row.location == GroupLocation.BUFFER:
                self.buffers.setdefault(row.env_id, []).append(row)
            elif row.location == GroupLocation.RETIRED:
                self.retired.append(row.group_id)
            if row.location in (GroupLocation.QUEUE, GroupLocation.BUFFER):
                self._count_waiting(row.size, row.nbytes)
            if row.queue_sequence and (latest_row is None or row.queue_sequence > latest_row.queue_sequence):
                latest_row = row
        self.queue.sort(key=lambda r: r.queue_sequence)
        heapq.heapify(self.retired)
        for batch in snap.batches:
            if batch.state == BatchState.PENDING:
                self.stack.append(batch)
                self._count_batch(batch, +1)
            else:
                self.unacked[batch.batch_id] = batch
        marks = snap.high_water_marks
        self.next_group_id = max([marks.group_id, *self.groups]) + 1
        self.next_batch_id = max([marks.batch_id, *(b.batch_id for b in snap.batches)]) + 1
        self.next_queue_sequence = (
            max([marks.queue_sequence, snap.latest_queue_sequence, *(r.queue_sequence for r in snap.groups)])
            + 1
        )
        self.next_batch_position = max([marks.batch_position, *(b.position for b in snap.batches)]) + 1
        self.latest_group_id: int | None = None
        self.latest_data: bytes | None = snap.latest
        if latest_row is not None and latest_row.queue_sequence > snap.latest_queue_sequence:
            self.latest_group_id = latest_row.group_id
            self.latest_data = None

    def _transaction(self):
        return _Guard(self)

    # ------------------------------------------------------------------ accounting

    def _count_waiting(self, sequences: int, nbytes: int, sign: int = 1) -> None:
        self.waiting_sequences += sign * sequences
        self.waiting_bytes += sign * nbytes

    def _count_batch(self, batch: BatchRow, sign: int) -> None:
        for group_id in batch.group_ids:
            row = self.groups[group_id]
            self._count_waiting(row.size, row.nbytes, sign)

    def batch_sequences(self, batch: BatchRow) -> int:
        return sum(self.groups[g].size for g in batch.group_ids)

    @property
    def queue_sequences(self) -> int:
        return sum(r.size for r in self.queue)

    # ------------------------------------------------------------------ registration

    def register(self, registration: Registration) -> int:
        """Initialise the run unless already registered; returns a new requester uuid (128-bit int)."""
        if not self.meta.registered:
            meta = RunMeta(
                registered=True,
                wandb_group=registration.wandb_group,
                wandb_project=registration.wandb_project,
                batch_size=int(registration.batch_size),
                max_token_len=int(registration.max_token_len),
                checkpoint_dir=registration.checkpoint_dir,
                save_checkpoint_interval=registration.save_checkpoint_interval,
                num_steps=registration.num_steps,
                step=registration.starting_step,
                started=False,
                max_staleness=registration.max_staleness,
            )
            with self._transaction() as tx:
                tx.put_meta(asdict(meta))
                self.meta = meta
        return uuid.uuid4().int

    def register_env(self, request: RegisterEnv) -> dict[str, Any]:
        """Add an env once the trainer has started; ``wait for trainer to start`` before that."""
        meta = self.meta
        if not (meta.registered and meta.started):
            return {"status": "wait for trainer to start"}
        if meta.batch_size > 0 and (
            request.group_size > meta.batch_size or meta.batch_size % request.group_size
        ):
            raise InvalidRequest(
                [
                    error(
                        "unbatchable_group",
                        ["body", "group_size"],
                        f"group_size {request.group_size} must divide the trainer's batch size "
                        f"{meta.batch_size}, or its groups could never be batched",
                        input=request.group_size,
                    )
                ]
            )
        same_name = sum(1 for e in self.envs if e.desired_name == request.desired_name)
        record = EnvRecord(
            registered_id=len(self.envs),
            max_context_len=request.max_token_length,
            weight=request.weight,
            desired_name=request.desired_name,
            real_name=f"{request.desired_name}_{same_name}",
            last_update=self.clock(),
            connected=True,
            min_batch_allocation=request.min_batch_allocation,
            group_size=request.group_size,
        )
        with self._transaction() as tx:
            tx.put_env(record.registered_id, record.to_dict())
            self.envs.append(record)
        self._heard_from(record.registered_id)
        return {
            "status": "success",
            "env_id": record.registered_id,
            "wandb_name": record.real_name,
            "checkpoint_dir": meta.checkpoint_dir or "",
            "starting_step": meta.step,
            "checkpoint_interval": meta.save_checkpoint_interval,
            "num_steps": meta.num_steps,
        }

    def disconnect_env(self, env_id: int) -> dict[str, Any]:
        """Mark an env disconnected; ``{"status": "failure", "error": ...}`` for a bad id (compat)."""
        if not self.meta.registered:
            return {"status": "failure", "error": NOT_REGISTERED_MESSAGE}
        if env_id < 0:
            return {"status": "failure", "error": "env_id must be >= 0"}
        if env_id >= len(self.envs):
            return {"status": "failure", "error": "list index out of range"}
        env = self.envs[env_id]
        with self._transaction() as tx:
            env.connected = False
            tx.put_env(env_id, env.to_dict())
        return {"status": "success"}

    def admission_rules(self) -> AdmissionRules:
        """What an incoming group must satisfy right now (see :mod:`atroposlib.api.admission`)."""
        meta = self.meta
        return AdmissionRules(
            batch_size=meta.batch_size if meta.registered and meta.batch_size > 0 else None,
            max_token_len=meta.max_token_len if meta.registered and meta.max_token_len > 0 else None,
            env_group_sizes=tuple(e.group_size for e in self.envs),
            env_id_required=any(e.min_batch_allocation is not None for e in self.envs),
        )

    # ------------------------------------------------------------------ ingest

    def ingest(self, groups: list[Group]) -> list[dict[str, Any]]:
        """Queue (or buffer) validated groups; all or nothing.

        Returns one ``{"status": "received"}`` or ``{"status": "buffered", "buffer_size": n}`` per
        group. Raises :class:`QueueFull` when the waiting data would exceed the queue limit and
        :class:`InvalidRequest` when the request alone exceeds it.
        """
        new_sequences = sum(group.size for group in groups)
        new_bytes = sum(len(group.data) for group in groups)
        self._check_capacity(new_sequences, new_bytes)
        now = self.clock()
        results = []
        for group in groups:
            self._heard_from(group.env_id)
        with self._transaction() as tx:
            for group in groups:
                results.append(self._add_group(tx, group, now))
            self._collect(tx)
        counters = self.counters
        for group in groups:
            size = group.size
            counters.groups_received += 1
            counters.sequences_received += size
            stats = counters.per_env.setdefault(group.env_id, EnvStats())
            stats.groups += 1
            stats.sequences += size
            stats.score_sum += math.fsum(group.scores)
            stats.score_count += len(group.scores)
        return results

    def _check_capacity(self, sequences: int, nbytes: int) -> None:
        for limit, waiting, new, unit, flag in (
            (self.max_queue_sequences, self.waiting_sequences, sequences, "sequences", "max_queue_sequences"),
            (self.max_queue_bytes, self.waiting_bytes, nbytes, "bytes", "max_queue_bytes"),
        ):
            if not limit:
                continue
            if new > limit:
                raise InvalidRequest(
                    [
                        error(
                            "queue_limit",
                            ["body"],
                            f"the request holds {new} {unit}, more than the whole queue limit "
                            f"({flag}={limit}); send smaller requests",
                        )
                    ]
                )
            if waiting + new > limit:
                raise QueueFull(f"queue holds {waiting} of {limit} {unit}; retry later")

    def _add_group(self, tx: Transaction, group: Group, now: float) -> dict[str, Any]:
        group_id = self.next_group_id
        self.next_group_id += 1
        size = group.size
        env_id = group.env_id
        blob = group.data
        row = GroupRow(group_id, env_id, size, len(blob), GroupLocation.QUEUE, 0, self.meta.step, now)
        self.groups[group_id] = row
        self._count_waiting(size, len(blob))
        if env_id is not None and 0 <= env_id < len(self.envs) and size != self.envs[env_id].group_size:
            target = self.envs[env_id].group_size
            row.location = GroupLocation.BUFFER
            tx.add_group(row, blob)
            buffer = self.buffers.setdefault(env_id, [])
            buffer.append(row)
            picked = subset_summing_to([r.size for r in buffer], target)
            if picked:
                chosen = set(picked)
                flushed = [buffer[i] for i in picked]
                buffer[:] = [r for i, r in enumerate(buffer) if i not in chosen]
                for flushed_row in flushed:
                    self._enqueue(flushed_row)
                tx.move_groups(
                    [r.group_id for r in flushed], GroupLocation.QUEUE, [r.queue_sequence for r in flushed]
                )
            return {"status": "buffered", "buffer_size": sum(r.size for r in buffer)}
        self._enqueue(row)
        tx.add_group(row, blob)
        return {"status": "received"}

    def _enqueue(self, row: GroupRow) -> None:
        row.location = GroupLocation.QUEUE
        row.queue_sequence = self.next_queue_sequence
        self.next_queue_sequence += 1
        self.queue.append(row)
        self.latest_group_id = row.group_id
        self.latest_data = None

    # ------------------------------------------------------------------ batches

    def next_batch(self) -> ServedBatch | None:
        """Serve the next batch (``GET /batch``), forming every formable batch if none is pending.

        Pending batches are served newest first (LIFO); forming ``k`` batches advances the step
        counter by ``k``. Returns ``None`` when no batch can be formed. Raises
        :class:`NotRegistered` before registration.
        """
        meta = self.meta
        if not meta.registered:
            raise NotRegistered(NOT_REGISTERED_MESSAGE)
        formed: list[list[int]] = []
        if self.stack:
            serve_group_ids = self.stack[-1].group_ids
        else:
            formed = self._formable_batches()
            if not formed:
                if not meta.started:
                    with self._transaction() as tx:
                        meta.started = True
                        tx.put_meta(asdict(meta))
                return None
            serve_group_ids = formed[-1]
        # Read before the transaction: serving may discard the oldest unacknowledged batch.
        blobs = self.store.read_groups(serve_group_ids)
        sequences = sum(self.groups[g].size for g in serve_group_ids)
        with self._transaction() as tx:
            meta.started = True
            if formed:
                for group_ids in formed:
                    batch = BatchRow(
                        self.next_batch_id, BatchState.PENDING, self.next_batch_position, 0, group_ids
                    )
                    self.next_batch_id += 1
                    self.next_batch_position += 1
                    for group_id in group_ids:
                        self.groups[group_id].location = GroupLocation.BATCH
                    tx.move_groups(group_ids, GroupLocation.BATCH)
                    tx.put_batch(batch)
                    self.stack.append(batch)
                self.queue = [r for r in self.queue if r.location == GroupLocation.QUEUE]
                meta.step += len(formed)
                self.counters.batches_formed += len(formed)
            tx.put_meta(asdict(meta))
            batch = self.stack.pop()
            batch.state = BatchState.SERVED
            batch.served += 1
            batch.position = self.next_batch_position
            self.next_batch_position += 1
            tx.put_batch(batch)
            self.unacked[batch.batch_id] = batch
            self._count_batch(batch, -1)
            while len(self.unacked) > self.max_unacked_batches:
                _, old = self.unacked.popitem(last=False)
                tx.delete_batch(old.batch_id)
                tx.put_high_water_marks(self._high_water_marks())
                self._retire(tx, old.group_ids)
            self._collect(tx)
        self.counters.batches_served += 1
        self.counters.sequences_served += sequences
        body = dumps({"batch": [msgspec.Raw(b) for b in blobs], "batch_id": batch.batch_id})
        return ServedBatch(batch.batch_id, body, len(blobs), sequences)

    # ------------------------------------------------------------------ heartbeat

    def _heard_from(self, env_id: int | None) -> None:
        """Record contact from a registered env (kept in memory: a poll costs no write)."""
        if env_id is not None and 0 <= env_id < len(self.envs):
            self._last_heard[env_id] = self.clock()

    def is_live(self, env: EnvRecord) -> bool:
        """Connected, and heard from within ``env_heartbeat_seconds`` (always, when that is 0)."""
        window = self.env_heartbeat_seconds
        heard = self._last_heard.get(env.registered_id, self._opened_at)
        return env.connected and (window <= 0 or self.clock() - heard <= window)

    def live_envs(self) -> list[EnvRecord]:
        """The env records as batching sees them: a silent env counts as disconnected (its weight and
        ``min_batch_allocation`` go to the others) until it is heard from again."""
        return [env if self.is_live(env) else replace(env, connected=False) for env in self.envs]

    def _formable_batches(self) -> list[list[int]]:
        """Every batch the queue can form now, as lists of group ids (formation order)."""
        queue = self.queue
        if not queue:
            return []
        has_min = any(e.min_batch_allocation is not None for e in self.envs)
        mins = minimum_allocations(e.to_dict() for e in self.live_envs()) if has_min else None
        batches = drain_batches(
            [r.size for r in queue], [r.env_id for r in queue], self.meta.batch_size, mins
        )
        return [[queue[i].group_id for i in batch] for batch in batches]

    def acknowledge(self, batch_id: int) -> None:
        """Forget a served batch for good (``POST /batch/ack``); :class:`UnknownBatch` otherwise."""
        batch = self.unacked.get(batch_id)
        in_stack = None
        if batch is None:
            in_stack = next((b for b in self.stack if b.batch_id == batch_id and b.served), None)
            if in_stack is None:
                raise UnknownBatch(f"no served, unacknowledged batch with batch_id {batch_id}")
        with self._transaction() as tx:
            if batch is not None:
                del self.unacked[batch_id]
            else:
                batch = in_stack
                self.stack.remove(batch)
                self._count_batch(batch, -1)
            tx.delete_batch(batch_id)
            tx.put_high_water_marks(
                self._high_water_marks()
            )  # the newest batch's row may be gone now: its id is never reused
            self._retire(tx, batch.group_ids)
            self._collect(tx)

    def replay(self) -> int:
        """Re-queue every unacknowledged batch, oldest served first (``POST /batch/replay``)."""
        batches = list(self.unacked.values())
        if not batches:
            return 0
        with self._transaction() as tx:
            # The stack is served from its end, so push the newest first and the oldest last.
            for batch in reversed(batches):
                batch.state = BatchState.PENDING
                batch.position = self.next_batch_position
                self.next_batch_position += 1
                tx.put_batch(batch)
                self.stack.append(batch)
                self._count_batch(batch, +1)
            self.unacked.clear()
        return len(batches)

    def _retire(self, tx: Transaction, group_ids: list[int]) -> None:
        """Groups whose batch is done; kept while inside the inspection window."""
        for group_id in group_ids:
            row = self.groups.get(group_id)
            if row is not None:
                row.location = GroupLocation.RETIRED
                heapq.heappush(self.retired, group_id)
        tx.move_groups(group_ids, GroupLocation.RETIRED)

    def _collect(self, tx: Transaction) -> None:
        """Delete retired groups that fell out of the inspection window (``inspect_history``)."""
        threshold = self.next_group_id - 1 - self.inspect_history
        doomed = []
        while self.retired and self.retired[0] <= threshold:
            doomed.append(heapq.heappop(self.retired))
        if not doomed:
            return
        if self.latest_group_id in doomed:
            self._preserve_latest(tx)
        for group_id in doomed:
            self.groups.pop(group_id, None)
        tx.delete_groups(doomed)
        tx.put_high_water_marks(self._high_water_marks())

    def _high_water_marks(self) -> HighWaterMarks:
        """The highest id of each kind handed out so far (stored so that a restart never reuses one)."""
        return HighWaterMarks(
            group_id=self.next_group_id - 1,
            batch_id=self.next_batch_id - 1,
            queue_sequence=self.next_queue_sequence - 1,
            batch_position=self.next_batch_position - 1,
        )

    def _preserve_latest(self, tx: Transaction) -> None:
        """Copy the latest group out of its row before the row goes (reset does not clear it)."""
        group_id = self.latest_group_id
        if group_id is None:
            return
        data = self.store.read_group(group_id)
        if data is not None:
            tx.put_latest(data, self.groups[group_id].queue_sequence)
            self.latest_data = data
        self.latest_group_id = None

    # ------------------------------------------------------------------ reset

    def reset(self) -> None:
        """``GET /reset_data``: drop queue, buffers, batches, envs and registration.

        Kept: ``max_token_len``, ``checkpoint_dir``, ``save_checkpoint_interval`` and the latest
        example (compat: atroposlib 0.4.0 keeps them too). Ids are never reused.
        """
        old = self.meta
        with self._transaction() as tx:
            self._preserve_latest(tx)
            tx.reset(self._high_water_marks())
            meta = RunMeta(
                max_token_len=old.max_token_len,
                checkpoint_dir=old.checkpoint_dir,
                save_checkpoint_interval=old.save_checkpoint_interval,
            )
            tx.put_meta(asdict(meta))
            self.meta = meta
            self.envs = []
            self._last_heard.clear()
            self.groups = {}
            self.queue = []
            self.buffers = {}
            self.stack = []
            self.unacked = OrderedDict()
            self.retired = []
            self.waiting_sequences = 0
            self.waiting_bytes = 0

    # ------------------------------------------------------------------ reads

    def status(self) -> dict[str, int]:
        return {"current_step": self.meta.step, "queue_size": len(self.queue)}

    def info(self) -> dict[str, int]:
        """``batch_size`` and ``max_token_len``, plus ``max_staleness`` when the trainer registered one."""
        info = {"batch_size": self.meta.batch_size, "max_token_len": self.meta.max_token_len}
        if self.meta.max_staleness is not None:
            info["max_staleness"] = self.meta.max_staleness
        return info

    def wandb_info(self) -> dict[str, str | None]:
        return {"group": self.meta.wandb_group, "project": self.meta.wandb_project}

    def latest_example(self) -> bytes:
        """Stored JSON of the last group that entered the queue (9 empty lists before any)."""
        if self.latest_group_id is not None:
            data = self.store.read_group(self.latest_group_id)
            if data is not None:
                return data
        if self.latest_data is not None:
            return self.latest_data
        return dumps(EMPTY_LATEST_EXAMPLE)

    def env(self, env_id: int | None) -> EnvRecord | None:
        """The registered env with this id, or ``None``."""
        if env_id is None or not 0 <= env_id < len(self.envs):
            return None
        return self.envs[env_id]

    def status_env(self, env_id: int) -> dict[str, Any]:
        """``GET /status-env`` for one env (:func:`atroposlib.api.backlog.env_status`).

        Raises :class:`NotRegistered` or :class:`UnknownEnv`. The env's group size grows to the
        largest group it has queued, and is stored.
        """
        if not self.meta.registered:
            raise NotRegistered(NOT_REGISTERED_MESSAGE)
        if env_id < 0 or env_id >= len(self.envs):
            raise UnknownEnv(f"unknown env_id {env_id}: {len(self.envs)} environment(s) are registered")
        self._heard_from(env_id)
        status, group_size = env_status(
            env_id,
            self.live_envs(),
            ((r.env_id, r.size) for r in self.queue),
            self.meta.batch_size,
            self.meta.step,
        )
        env = self.envs[env_id]
        if group_size != env.group_size:
            with self._transaction() as tx:
                env.group_size = group_size
                tx.put_env(env_id, env.to_dict())
        return status

    def health(self) -> dict[str, Any]:
        """``GET /health``: counts of what the state holds."""
        return {
            "status": "ok",
            "store": self.store.kind,
            "registered": self.meta.registered,
            "started": self.meta.started,
            "current_step": self.meta.step,
            "queue_groups": len(self.queue),
            "queue_sequences": self.queue_sequences,
            "buffered_sequences": sum(r.size for rows in self.buffers.values() for r in rows),
            "pending_batches": len(self.stack),
            "unacked_batches": len(self.unacked),
            "waiting_sequences": self.waiting_sequences,
            "envs": len(self.envs),
        }


class _Guard:
    """A store transaction that rebuilds the mirror from the store if it fails.

    The mirror is updated while the transaction is being written; when the commit fails (disk
    full, I/O error) the committed state is reloaded so that memory never claims more than the
    store holds.
    """

    def __init__(self, state: TrajectoryState):
        self._state = state
        self._cm = state.store.transaction()

    def __enter__(self) -> Transaction:
        return self._cm.__enter__()

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self._cm.__exit__(exc_type, exc, tb)
        except BaseException:
            self._reload()
            raise
        if exc_type is not None:
            self._reload()
        return False

    def _reload(self) -> None:
        if self._state.store.durable:
            counters = self._state.counters
            self._state._load()
            self._state.counters = counters
