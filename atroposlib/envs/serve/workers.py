"""The item workers of ``serve``: starting, re-queueing, cancelling and finishing items.

:class:`WorkerPoolMixin` is part of :class:`~atroposlib.envs.serve.runtime.ServeRuntimeMixin`:

* Once ``collect_trajectories`` has returned, an item's groups are post-processed, checked and sent by a
  separate finishing task that is never cancelled (not by backpressure, not by an evaluation, not by a
  worker-count reduction), so a slow API never holds an inference slot. At most ``max_num_workers`` items
  may be finishing; beyond that no new work starts. Only workers still inside ``collect_trajectories`` are
  cancelled, and only for ``STOP_TRAIN`` evaluations, worker timeouts and shutdown.
* An item whose worker timed out or raised is re-queued (ahead of new items) up to ``max_item_retries`` times.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Optional

from atroposlib.envs.serve.scheduling import offpolicy_window, train_worker_cap
from atroposlib.envs.serve.sending import POLICY_STEP, describe_item, trim_buffer

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


class WorkerPoolMixin:
    """The workers that collect items and the tasks that finish them."""

    @property
    def _queue_estimate(self) -> int:
        """Groups of ours queued at the API: the last status, plus what was sent since, plus items whose
        groups are being checked or sent right now."""
        return (
            int(self.status_dict.get("queue_size", 0)) + self._groups_sent_since_status + len(self._finishing)
        )

    def _requeue(self, item: Any, attempts: int, reason: str) -> None:
        """Put an item back ahead of new work, or give up after ``max_item_retries`` failed attempts."""
        if attempts > self.config.max_item_retries:
            self.items_abandoned += 1
            logger.error(
                "[%s] giving up on item %s after %d attempts (%s)",
                self.env_label,
                describe_item(item),
                attempts,
                reason,
            )
            return
        logger.warning(
            "[%s] item %s %s; re-queued (attempt %d of %d)",
            self.env_label,
            describe_item(item),
            reason,
            attempts + 1,
            self.config.max_item_retries + 1,
        )
        self._requeued.append((item, attempts))

    def _cancel_collecting(self, uuids: list[str], *, reason: str, count_attempt: bool) -> None:
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
                self._requeue(entry["item"], attempts + 1, reason)
            else:
                resumed.append((entry["item"], attempts))
        if resumed:
            logger.info("[%s] %s: %d item(s) put back in the queue", self.env_label, reason, len(resumed))
            self._requeued.extendleft(reversed(resumed))

    def _reap_timed_out_workers(self) -> None:
        timeout = self.config.worker_timeout
        if timeout <= 0:
            return
        now = time.time()
        expired = [u for u, e in self.running_items.items() if now - e["start_time"] > timeout]
        if expired:
            self._cancel_collecting(expired, reason=f"timed out after {timeout:g} s", count_attempt=True)

    def _take_queued_item(self) -> Optional[tuple[Any, int]]:
        if self._requeued:
            return self._requeued.popleft()
        if self.backlog:
            return self.backlog.pop(0), 0
        return None

    def _on_worker_done(self, task: asyncio.Task, item: Any) -> None:
        self.workers.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                logger.error("[%s] worker for item %s crashed: %r", self.env_label, describe_item(item), exc)
            elif task.result():
                self.last_completed_item = item
        if self._wakeup is not None:
            self._wakeup.set()

    def _launch_worker(self, item: Any, attempts: int = 0) -> str:
        item_uuid = str(uuid.uuid4())
        task = asyncio.create_task(self.handle_env(item_uuid))
        self.running_items[item_uuid] = {
            "item": item,
            "worker": task,
            "start_time": time.time(),
            "attempts": attempts,
        }
        self.workers.add(task)
        task.add_done_callback(lambda t, i=item: self._on_worker_done(t, i))
        return item_uuid

    def _too_many_finishing(self) -> bool:
        """Items waiting to be delivered are bounded too: at most ``max_num_workers`` of them."""
        return len(self._finishing) >= max(1, self.max_num_workers)

    async def add_train_workers(self) -> None:
        """Start workers up to the current cap (see :func:`~atroposlib.envs.serve.scheduling.train_worker_cap`).

        Items come from re-queued items first, then ``backlog`` (oldest first), then ``get_next_item()``;
        ``None`` from ``get_next_item`` ends this round. Running workers above the cap are left to finish.
        """
        eval_running = self.eval_runner is not None and not self.eval_runner.done()
        status = self.status_dict or {}
        cap = train_worker_cap(
            max_num_workers=self.max_num_workers,
            eval_running=eval_running,
            eval_handling=self.config.eval_handling,
            eval_limit_ratio=self.config.eval_limit_ratio,
            # queued plus in-flight groups: the staleness bound is enforced before generation
            max_batches_offpolicy=offpolicy_window(
                self.config.max_batches_offpolicy, getattr(self.config, "max_staleness", None)
            ),
            derived_batch_size=self.derived_batch_size,
            group_size=self.config.group_size,
            queue_size=self._queue_estimate,
            batch_size=self.config.batch_size,
            min_batch_allocation=self.config.min_batch_allocation,
            self_queue_size=int(status.get("self_queue_size", 0)),
            max_group_size=int(status.get("max_group_size", 1) or 1),
        )
        if self.curr_step != 0 or self.workers:
            self.workers_added_list.append(cap - len(self.workers))
            trim_buffer(self.workers_added_list)
        if time.monotonic() < self._next_item_retry_at:
            return
        while len(self.workers) < cap and not self._shutdown_requested and not self._too_many_finishing():
            queued = self._take_queued_item()
            if queued is None:
                try:
                    item = await self.get_next_item()
                except Exception:
                    logger.error(
                        "[%s] get_next_item() failed; trying again in 5 s", self.env_label, exc_info=True
                    )
                    self._next_item_retry_at = time.monotonic() + 5.0
                    return
                if item is None:
                    return
                queued = (item, 0)
            self._launch_worker(*queued)

    async def _safe_cleanup(self) -> None:
        try:
            await self.cleanup()
        except Exception:
            logger.error("[%s] cleanup() failed", self.env_label, exc_info=True)

    def _record_task(self, started: float, success: bool) -> None:
        duration = time.time() - started
        self.task_duration.append(duration)
        self.task_successful.append(success)
        (self.succeeded_task_duration if success else self.failed_task_duration).append(duration)
        for values in (
            self.task_duration,
            self.task_successful,
            self.succeeded_task_duration,
            self.failed_task_duration,
        ):
            trim_buffer(values)

    async def handle_env(self, item_uuid: str) -> Any:
        """One worker: collect the groups of one item, then hand them on to be post-processed and sent.

        Failures of ``collect_trajectories`` re-queue the item (bounded); ``None`` results are skipped. Once
        collection is done the item leaves ``running_items``; during ``serve`` the rest (post-processing,
        checks, delivery, ``cleanup``) runs in a separate finishing task that the scheduler never cancels,
        so a slow or backpressured API does not hold a worker slot (their number is bounded separately).
        """
        entry = self.running_items.get(item_uuid)
        if entry is None:
            logger.warning(
                "[%s] worker %s has no item (it was cancelled before starting)", self.env_label, item_uuid
            )
            return None
        item = entry["item"]
        attempts = entry.get("attempts", 0)
        started = time.time()
        # This task's context (copied into its finishing task) remembers the policy the item was generated with.
        POLICY_STEP.set(self.curr_step)
        try:
            to_postprocess, to_backlog = unpack_collect_result(await self.collect_trajectories(item))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self.running_items.pop(item_uuid, None) is not None:
                logger.debug("collect_trajectories traceback", exc_info=True)
                self._requeue(
                    item, attempts + 1, f"failed in collect_trajectories ({type(exc).__name__}: {exc})"
                )
            self._record_task(started, success=False)
            await self._safe_cleanup()
            return None
        # From here on the item is "finishing": the scheduler no longer sees (or cancels) it.
        self.running_items.pop(item_uuid, None)
        if to_backlog:
            self.backlog.extend(to_backlog)
        finishing = self._finish_item(item, to_postprocess, started)
        if self._wakeup is None:  # not inside env_manager: finish inline
            return await finishing
        task = asyncio.create_task(finishing)
        self._finishing.add(task)
        task.add_done_callback(self._on_finishing_done)
        return to_postprocess

    def _on_finishing_done(self, task: asyncio.Task) -> None:
        self._finishing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("[%s] finishing an item crashed: %r", self.env_label, task.exception())
        if self._wakeup is not None:
            self._wakeup.set()

    async def _finish_item(self, item: Any, to_postprocess: Any, started: float) -> Any:
        """Post-process, check and send one item's groups, then run ``cleanup``."""
        if to_postprocess:
            try:
                to_postprocess = await self.postprocess_histories(to_postprocess)
            except Exception:
                logger.error(
                    "[%s] postprocess_histories failed for item %s",
                    self.env_label,
                    describe_item(item),
                    exc_info=True,
                )
                to_postprocess = None
        self._record_task(started, success=to_postprocess is not None)
        if to_postprocess is not None:
            try:
                await self.handle_send_to_api(to_postprocess, item)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.error(
                    "[%s] handle_send_to_api failed for item %s",
                    self.env_label,
                    describe_item(item),
                    exc_info=True,
                )
        await self._safe_cleanup()
        return to_postprocess


__all__ = ["WorkerPoolMixin", "unpack_collect_result"]
