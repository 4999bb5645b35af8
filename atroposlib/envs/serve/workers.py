"""The item workers of ``serve``: starting, re-queueing, cancelling and finishing items.

:class:`WorkerPool` belongs to an :class:`~atroposlib.envs.serve.runtime.EnvRunner`. Each worker task runs the env's
``handle_env`` hook (default: :meth:`WorkerPool.collect`), which calls the env's ``collect_trajectories`` and then
``postprocess_histories``, ``handle_send_to_api`` and ``cleanup`` (:meth:`WorkerPool.finish_item`):

* Once ``collect_trajectories`` has returned, an item's groups are post-processed, checked and sent by a
  separate finishing task that is never cancelled (not by backpressure, not by an evaluation, not by a
  worker-count reduction), so a slow API never holds an inference slot. At most ``max_num_workers`` items
  may be finishing; beyond that no new work starts. Only workers still inside ``collect_trajectories`` are
  cancelled, and only for ``STOP_TRAIN`` evaluations, worker timeouts and shutdown.
* An item whose worker timed out or raised is re-queued (ahead of new items) up to ``max_item_retries`` times.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Optional

from atroposlib.envs.serve.scheduling import offpolicy_window, train_worker_cap
from atroposlib.envs.serve.sending import POLICY_STEP, describe_item, trim_buffer

if TYPE_CHECKING:
    from atroposlib.envs.serve.runtime import EnvRunner

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")


def unpack_collect_result(result: Any) -> tuple[Any, list]:
    """``collect_trajectories`` returns ``(group | [groups] | None, backlog)``; tolerate a bare ``None``."""
    if result is None:
        return None, []
    if isinstance(result, tuple) and len(result) == 2:
        to_postprocess, backlog = result
        return to_postprocess, list(backlog or [])
    raise TypeError(
        f"collect_trajectories must return (group_or_groups_or_None, backlog_items), got {type(result).__name__}"
    )


class WorkerPool:
    """The workers that collect items and the tasks that finish them, for one :class:`EnvRunner`.

    State: ``workers`` (tasks still collecting or finishing inline), ``running_items`` (uuid -> ``{"item",
    "worker", "start_time", "attempts"}`` of items still collecting), ``backlog`` (items returned by
    ``collect_trajectories``), ``requeued`` (``(item, attempts)`` to retry first), ``finishing`` (tasks sending
    items' groups, never cancelled by the scheduler) and ``items_abandoned``.
    """

    def __init__(self, runner: EnvRunner) -> None:
        self.runner = runner
        self.env = runner.env
        self.workers: set[asyncio.Task] = set()
        self.running_items: dict[str, dict[str, Any]] = {}
        self.backlog: list[Any] = []
        self.requeued: collections.deque[tuple[Any, int]] = collections.deque()
        self.finishing: set[asyncio.Task] = set()
        self.items_abandoned = 0
        self.last_completed_item: Any = None
        self._next_item_retry_at = 0.0

    @property
    def queue_estimate(self) -> int:
        """Groups of ours queued at the API: the last status, plus what was sent since, plus items whose
        groups are being checked or sent right now."""
        status = self.runner.status_dict
        return (
            int(status.get("queue_size", 0))
            + self.runner.sender.groups_sent_since_status
            + len(self.finishing)
        )

    def requeue(self, item: Any, attempts: int, reason: str) -> None:
        """Put an item back ahead of new work, or give up after ``max_item_retries`` failed attempts."""
        retries = self.env.config.max_item_retries
        if attempts > retries:
            self.items_abandoned += 1
            logger.error(
                "[%s] giving up on item %s after %d attempts (%s)",
                self.env.env_label,
                describe_item(item),
                attempts,
                reason,
            )
            return
        logger.warning(
            "[%s] item %s %s; re-queued (attempt %d of %d)",
            self.env.env_label,
            describe_item(item),
            reason,
            attempts + 1,
            retries + 1,
        )
        self.requeued.append((item, attempts))

    def cancel_collecting(self, uuids: list[str], *, reason: str, count_attempt: bool) -> None:
        """Cancel workers still collecting (never one that is sending) and re-queue their items."""
        resumed: list[tuple[Any, int]] = []
        for item_uuid in uuids:
            entry = self.running_items.pop(item_uuid, None)
            if entry is None:
                continue
            entry["worker"].cancel()
            self.workers.discard(entry["worker"])
            attempts = entry.get("attempts", 0)
            if count_attempt:
                self.requeue(entry["item"], attempts + 1, reason)
            else:
                resumed.append((entry["item"], attempts))
        if resumed:
            logger.info("[%s] %s: %d item(s) put back in the queue", self.env.env_label, reason, len(resumed))
            self.requeued.extendleft(reversed(resumed))

    def reap_timed_out(self) -> None:
        """Cancel and re-queue (counting an attempt) items collecting for longer than ``worker_timeout``."""
        timeout = self.env.config.worker_timeout
        if timeout <= 0:
            return
        now = time.time()
        expired = [u for u, e in self.running_items.items() if now - e["start_time"] > timeout]
        if expired:
            self.cancel_collecting(expired, reason=f"timed out after {timeout:g} s", count_attempt=True)

    def cancel_all(self) -> None:
        """Cancel every worker and finishing task (a second signal: stop now)."""
        for worker in [*self.workers, *self.finishing]:
            worker.cancel()

    def _take_queued_item(self) -> Optional[tuple[Any, int]]:
        if self.requeued:
            return self.requeued.popleft()
        if self.backlog:
            return self.backlog.pop(0), 0
        return None

    def _on_worker_done(self, task: asyncio.Task, item: Any) -> None:
        self.workers.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                logger.error(
                    "[%s] worker for item %s crashed: %r", self.env.env_label, describe_item(item), exc
                )
            elif task.result():
                self.last_completed_item = item
        self.runner.shutdown.wake()

    def launch(self, item: Any, attempts: int = 0) -> str:
        """Start a worker running the env's ``handle_env`` for ``item``; returns the item's uuid."""
        item_uuid = str(uuid.uuid4())
        task = asyncio.create_task(self.env.handle_env(item_uuid))
        self.running_items[item_uuid] = {
            "item": item,
            "worker": task,
            "start_time": time.time(),
            "attempts": attempts,
        }
        self.workers.add(task)
        task.add_done_callback(lambda t, i=item: self._on_worker_done(t, i))
        return item_uuid

    def too_many_finishing(self) -> bool:
        """Items waiting to be delivered are bounded too: at most ``max_num_workers`` of them."""
        return len(self.finishing) >= max(1, self.runner.max_num_workers)

    def worker_cap(self) -> int:
        """How many workers may run now (see :func:`~atroposlib.envs.serve.scheduling.train_worker_cap`)."""
        runner, config = self.runner, self.env.config
        eval_running = runner.eval_runner is not None and not runner.eval_runner.done()
        status = runner.status_dict or {}
        return train_worker_cap(
            max_num_workers=runner.max_num_workers,
            eval_running=eval_running,
            eval_handling=config.eval_handling,
            eval_limit_ratio=config.eval_limit_ratio,
            # queued plus in-flight groups: the staleness bound is enforced before generation
            max_batches_offpolicy=offpolicy_window(
                config.max_batches_offpolicy, getattr(config, "max_staleness", None)
            ),
            derived_batch_size=self.env.derived_batch_size,
            group_size=config.group_size,
            queue_size=self.queue_estimate,
            batch_size=config.batch_size,
            min_batch_allocation=config.min_batch_allocation,
            self_queue_size=int(status.get("self_queue_size", 0)),
            max_group_size=int(status.get("max_group_size", 1) or 1),
        )

    async def add_workers(self) -> None:
        """Start workers up to :meth:`worker_cap` (the default ``add_train_workers``).

        Items come from re-queued items first, then ``backlog`` (oldest first), then the env's
        ``get_next_item()``; ``None`` from it ends this round. Running workers above the cap are left to finish.
        """
        cap = self.worker_cap()
        if self.runner.curr_step != 0 or self.workers:
            self.runner.wandb.workers_added_list.append(cap - len(self.workers))
            trim_buffer(self.runner.wandb.workers_added_list)
        if time.monotonic() < self._next_item_retry_at:
            return
        shutdown = self.runner.shutdown
        while len(self.workers) < cap and not shutdown.requested and not self.too_many_finishing():
            queued = self._take_queued_item()
            if queued is None:
                try:
                    item = await self.env.get_next_item()
                except Exception:
                    logger.error(
                        "[%s] get_next_item() failed; trying again in 5 s", self.env.env_label, exc_info=True
                    )
                    self._next_item_retry_at = time.monotonic() + 5.0
                    return
                if item is None:
                    return
                queued = (item, 0)
            self.launch(*queued)

    async def _safe_cleanup(self) -> None:
        try:
            await self.env.cleanup()
        except Exception:
            logger.error("[%s] cleanup() failed", self.env.env_label, exc_info=True)

    async def collect(self, item_uuid: str) -> Any:
        """One worker (the default ``handle_env``): collect the groups of one item, then hand them on to be
        post-processed and sent.

        Failures of ``collect_trajectories`` re-queue the item (bounded); ``None`` results are skipped. Once
        collection is done the item leaves ``running_items``; during ``serve`` the rest (:meth:`finish_item`)
        runs in a separate finishing task that the scheduler never cancels, so a slow or backpressured API
        does not hold a worker slot (their number is bounded separately).
        """
        entry = self.running_items.get(item_uuid)
        if entry is None:
            logger.warning(
                "[%s] worker %s has no item (it was cancelled before starting)", self.env.env_label, item_uuid
            )
            return None
        item = entry["item"]
        started = time.time()
        # This task's context (copied into its finishing task) remembers the policy the item was generated with.
        POLICY_STEP.set(self.runner.curr_step)
        try:
            to_postprocess, to_backlog = unpack_collect_result(await self.env.collect_trajectories(item))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self.running_items.pop(item_uuid, None) is not None:
                logger.debug("collect_trajectories traceback", exc_info=True)
                reason = f"failed in collect_trajectories ({type(exc).__name__}: {exc})"
                self.requeue(item, entry.get("attempts", 0) + 1, reason)
            self.runner.wandb.record_task(started, success=False)
            await self._safe_cleanup()
            return None
        # From here on the item is "finishing": the scheduler no longer sees (or cancels) it.
        self.running_items.pop(item_uuid, None)
        if to_backlog:
            self.backlog.extend(to_backlog)
        finishing = self.finish_item(item, to_postprocess, started)
        if not self.runner.shutdown.in_run:  # not inside a serve run: finish inline
            return await finishing
        task = asyncio.create_task(finishing)
        self.finishing.add(task)
        task.add_done_callback(self._on_finishing_done)
        return to_postprocess

    def _on_finishing_done(self, task: asyncio.Task) -> None:
        self.finishing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("[%s] finishing an item crashed: %r", self.env.env_label, task.exception())
        self.runner.shutdown.wake()

    async def finish_item(self, item: Any, to_postprocess: Any, started: float) -> Any:
        """The env's ``postprocess_histories``, then its ``handle_send_to_api``, then its ``cleanup``."""
        env = self.env
        if to_postprocess:
            try:
                to_postprocess = await env.postprocess_histories(to_postprocess)
            except Exception:
                logger.error(
                    "[%s] postprocess_histories failed for item %s",
                    env.env_label,
                    describe_item(item),
                    exc_info=True,
                )
                to_postprocess = None
        self.runner.wandb.record_task(started, success=to_postprocess is not None)
        if to_postprocess is not None:
            try:
                await env.handle_send_to_api(to_postprocess, item)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.error(
                    "[%s] handle_send_to_api failed for item %s",
                    env.env_label,
                    describe_item(item),
                    exc_info=True,
                )
        await self._safe_cleanup()
        return to_postprocess


__all__ = ["WorkerPool", "unpack_collect_result"]
