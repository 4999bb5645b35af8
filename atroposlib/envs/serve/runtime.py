"""The ``serve`` runtime: registration, the scheduling loop, item workers and a clean shutdown.

:class:`ServeRuntimeMixin` is part of :class:`~atroposlib.envs.base.BaseEnv`. Its guarantees:

* Once ``collect_trajectories`` has returned, an item's groups are post-processed, checked and sent by a
  separate finishing task that is never cancelled (not by backpressure, not by an evaluation, not by a
  worker-count reduction), so a slow API never holds an inference slot. At most ``max_num_workers`` items
  may be finishing; beyond that no new work starts. Only workers still inside ``collect_trajectories`` are
  cancelled, and only for ``STOP_TRAIN`` evaluations, worker timeouts and shutdown.
* An item whose worker timed out or raised is re-queued (ahead of new items) up to ``max_item_retries`` times.
* Losing the API is not fatal: status polls back off exponentially and the env registers again if the API
  no longer knows it. Registration waits for the trainer with a progress line every 30 s.
* On SIGTERM/SIGINT, on reaching ``total_steps`` or on any error, the env stops starting work, waits up to
  ``shutdown_timeout`` s for groups being sent (saving any it cannot deliver to the spill file), calls
  ``POST /disconnect-env``, finishes its wandb run and closes its JSONL file. A second signal stops at once
  (undelivered groups are still saved).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import threading
import time
import uuid
from typing import Any, Optional

from atroposlib.envs.groups import EvalHandlingEnum
from atroposlib.envs.serve.api_client import ApiRejected, ApiUnavailable
from atroposlib.envs.serve.scheduling import (
    backoff_delay,
    boundary_crossed,
    resolve_max_num_workers,
    should_pause,
    should_stop,
    train_worker_cap,
)
from atroposlib.envs.serve.sending import POLICY_STEP, describe_item, trim_buffer
from atroposlib.envs.serve.setup_errors import run_setup

logger = logging.getLogger("atroposlib.envs.base")

REPORT_INTERVAL_S = 30.0


def _unpack_collect_result(result: Any) -> tuple[Any, list]:
    """``collect_trajectories`` returns ``(group | [groups] | None, backlog)``; tolerate a bare ``None``."""
    if result is None:
        return None, []
    if isinstance(result, tuple) and len(result) == 2:
        to_postprocess, backlog = result
        return to_postprocess, list(backlog or [])
    raise TypeError(
        f"collect_trajectories must return (group_or_groups_or_None, backlog_items), got {type(result).__name__}"
    )


class ServeRuntimeMixin:
    """The online producer loop of an environment."""

    #: Seconds between two ``GET /status-env`` polls (the loop also wakes whenever a worker finishes).
    status_interval: float = 0.25

    def _init_runtime_state(self) -> None:
        self.env_id: Optional[int] = None
        self.status_dict: dict[str, Any] = {}
        self._requeued: collections.deque[tuple[Any, int]] = collections.deque()
        #: tasks post-processing and sending finished items (never cancelled by the scheduler)
        self._finishing: set[asyncio.Task] = set()
        self.items_abandoned = 0
        self._shutdown_requested = False
        self._stop_now = False
        self._phase = "idle"
        self._main_task: Optional[asyncio.Task] = None
        self._wakeup: Optional[asyncio.Event] = None
        self._shutdown_event: Optional[asyncio.Event] = None
        self._installed_signals: list[int] = []
        self._status_failures = 0
        self._next_status_at = 0.0
        self._next_info_at = 0.0
        self._next_report_at = 0.0
        self._next_item_retry_at = 0.0

    # ------------------------------------------------------------------------------------------------------
    # Shutdown plumbing
    # ------------------------------------------------------------------------------------------------------
    def request_shutdown(self, reason: str = "requested") -> None:
        """Ask a running ``env_manager`` to stop gracefully (safe to call from the event loop thread)."""
        if not self._shutdown_requested:
            logger.info("[%s] shutting down (%s)", self.env_label, reason)
        self._shutdown_requested = True
        if self._shutdown_event is not None:
            self._shutdown_event.set()
        if self._wakeup is not None:
            self._wakeup.set()

    async def _sleep_unless_shutdown(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; returns True early (or at once) when shutdown was requested."""
        if self._shutdown_requested:
            return True
        if self._shutdown_event is None:
            await asyncio.sleep(seconds)
        else:
            try:
                await asyncio.wait_for(self._shutdown_event.wait(), seconds)
            except asyncio.TimeoutError:
                pass
        return self._shutdown_requested

    async def _wait_for_wakeup(self, timeout: float) -> None:
        """Wait until a worker finishes, shutdown is requested, or ``timeout`` seconds pass."""
        if self._wakeup is None:
            await asyncio.sleep(timeout)
            return
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        self._wakeup.clear()

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self._shutdown_requested:
            self.request_shutdown(f"received {name}")
            if self._phase == "startup" and self._main_task is not None:
                self._main_task.cancel()
            return
        logger.warning(
            "[%s] second %s: stopping now; groups still being sent are saved locally", self.env_label, name
        )
        self._stop_now = True
        for worker in [*self.workers, *self._finishing]:
            worker.cancel()
        if self._phase == "startup" and self._main_task is not None:
            self._main_task.cancel()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                self._installed_signals.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def _remove_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed_signals:
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        self._installed_signals = []

    # ------------------------------------------------------------------------------------------------------
    # Talking to the API
    # ------------------------------------------------------------------------------------------------------
    def _registration(self) -> dict[str, Any]:
        if not self.config.wandb_name:
            self.config.wandb_name = self.name or type(self).__name__
        return {
            "max_token_length": self.config.max_token_length,
            "desired_name": self.config.wandb_name,
            "weight": self.config.inference_weight,
            "min_batch_allocation": self.config.min_batch_allocation,
            "group_size": self.config.group_size,
        }

    async def register_env(self) -> None:
        """``POST /register-env`` until the API accepts this env.

        Waits (1 s between tries, a log line every 30 s) while the API answers "wait for trainer to start";
        backs off exponentially (logging each failure) while the API is unreachable. A 4xx answer is a
        configuration error and raises ``RuntimeError`` with the API's reason.
        """
        registration = self._registration()
        started = time.monotonic()
        next_report = started
        failures = 0
        while True:
            if self._shutdown_requested:
                return
            try:
                data = await self.api.register_env(registration)
                failures = 0
            except ApiRejected as exc:
                raise RuntimeError(f"[{self.env_label}] the API refused registration: {exc.reason}") from exc
            except ApiUnavailable as exc:
                failures += 1
                delay = backoff_delay(failures, base=1.0)
                logger.warning(
                    "[%s] cannot reach the API at %s (%s); retrying in %.0f s",
                    self.env_label,
                    self.config.rollout_server_url,
                    exc,
                    delay,
                )
                await self._sleep_unless_shutdown(delay)
                continue
            if isinstance(data, dict) and data.get("status") == "success":
                break
            now = time.monotonic()
            if now >= next_report:
                logger.info(
                    "[%s] waiting for the trainer to start (%.0f s so far; API says %r)",
                    self.env_label,
                    now - started,
                    (data or {}).get("status") if isinstance(data, dict) else data,
                )
                next_report = now + REPORT_INTERVAL_S
            await self._sleep_unless_shutdown(1.0)
        self.env_id = data["env_id"]
        self.wandb_prepend = data.get("wandb_name")
        self.curr_step = int(data.get("starting_step", 0) or 0)
        self.checkpoint_dir = data.get("checkpoint_dir", "") or ""
        self.checkpoint_interval = int(data.get("checkpoint_interval", -1) or -1)
        if self.config.total_steps == -1:
            num_steps = int(data.get("num_steps", -1))
            if num_steps == -1:
                logger.warning(
                    "[%s] total_steps and the trainer's num_steps are both -1: running until stopped",
                    self.env_label,
                )
            self.config.total_steps = num_steps
        if self.api.label != self.env_label:
            self.api.label = self.env_label
        logger.info(
            "[%s] registered with the API as env_id %s at trainer step %d",
            self.env_label,
            self.env_id,
            self.curr_step,
        )
        if self.curr_step > 0:
            self.load_checkpoint()

    async def get_server_info(self) -> None:
        """Adopt the trainer's ``batch_size`` and ``max_token_len`` from ``GET /info`` (when not -1).

        Raises ``ValueError`` when ``group_size`` exceeds a known batch size (a group must fit in one batch).
        While the batch size is still unknown nothing is started; the loop asks again every few seconds.
        """
        try:
            info = await self.api.info()
        except (ApiUnavailable, ApiRejected) as exc:
            logger.warning("[%s] GET /info failed: %s", self.env_label, exc)
            return
        if not isinstance(info, dict):
            return
        batch_size = int(info.get("batch_size", -1))
        max_token_len = int(info.get("max_token_len", -1))
        if batch_size != -1:
            self.config.batch_size = batch_size
        if max_token_len != -1:
            self.max_token_len = max_token_len
        if self.config.batch_size == -1:
            logger.warning(
                "[%s] the trainer's batch size is unknown yet; waiting before generating", self.env_label
            )
        elif self.config.group_size > self.config.batch_size:
            raise ValueError(
                f"group_size ({self.config.group_size}) is larger than the trainer's batch_size "
                f"({self.config.batch_size}); a group must fit in one batch"
            )

    async def get_status(self) -> None:
        """Poll ``GET /status-env`` into ``status_dict``; refresh ``max_num_workers`` and the server weights."""
        status = await self.api.status_env(self.env_id)
        if not isinstance(status, dict):
            raise ApiUnavailable(f"unexpected /status-env answer: {status!r}")
        self.status_dict = status
        self._groups_sent_since_status = 0
        self.max_num_workers = resolve_max_num_workers(
            self.config.max_num_workers,
            self.config.max_num_workers_per_node,
            len(getattr(self.server, "servers", None) or []),
        )
        weight = status.get("env_weight")
        update = getattr(self.server, "update_weight", None)
        if weight is not None and update is not None:
            await update(weight)

    async def _refresh_status(self) -> bool:
        """``get_status`` with recovery; True when ``status_dict`` is fresh."""
        try:
            await self.get_status()
        except ApiRejected as exc:
            logger.warning(
                "[%s] the API rejected the status poll for env_id %s (%s); registering again",
                self.env_label,
                self.env_id,
                exc.reason,
            )
            self.env_id = None
            await self.register_env()
            return False
        except Exception as exc:  # ApiUnavailable, or a malformed answer: back off and try again
            self._status_failures += 1
            delay = backoff_delay(self._status_failures)
            logger.warning(
                "[%s] lost contact with the API (%s); retrying in %.1f s (attempt %d; running work continues)",
                self.env_label,
                exc,
                delay,
                self._status_failures,
            )
            await self._sleep_unless_shutdown(delay)
            return False
        if self._status_failures:
            logger.info("[%s] reconnected to the API", self.env_label)
        self._status_failures = 0
        return True

    # ------------------------------------------------------------------------------------------------------
    # Steps, evals, checkpoints
    # ------------------------------------------------------------------------------------------------------
    async def _evaluate_in_background(self) -> None:
        try:
            await self.evaluate()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.error("[%s] evaluate() failed", self.env_label, exc_info=True)

    async def env_step_checks(self) -> None:
        """React to a new trainer step: start an eval / save a checkpoint when a multiple of
        ``steps_per_eval`` / ``checkpoint_interval`` was passed, then log to wandb if enough was sent."""
        current = self.status_dict.get("current_step") if self.status_dict else None
        if current is None or current == self.curr_step:
            return
        if boundary_crossed(self.curr_step, current, self.config.steps_per_eval) is not None:
            if self.eval_runner is not None and not self.eval_runner.done():
                logger.warning(
                    "[%s] previous evaluation still running at step %d; skipping this one",
                    self.env_label,
                    current,
                )
            else:
                self.eval_runner = asyncio.create_task(self._evaluate_in_background())
                if self.config.eval_handling == EvalHandlingEnum.STOP_TRAIN:
                    self._cancel_collecting(
                        list(self.running_items), reason="evaluation started", count_attempt=False
                    )
        checkpoint_step = boundary_crossed(self.curr_step, current, self.checkpoint_interval)
        if checkpoint_step is not None:
            try:
                self.save_checkpoint(checkpoint_step)
            except Exception:
                logger.error(
                    "[%s] save_checkpoint(%d) failed", self.env_label, checkpoint_step, exc_info=True
                )
        self.curr_step = current
        if self.items_sent_this_step >= self.config.min_items_sent_before_logging:
            self.items_sent_this_step = 0
            try:
                await self.wandb_log({})
            except Exception:
                logger.error("[%s] wandb_log failed", self.env_label, exc_info=True)

    # ------------------------------------------------------------------------------------------------------
    # Workers
    # ------------------------------------------------------------------------------------------------------
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
            max_batches_offpolicy=self.config.max_batches_offpolicy,
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
            to_postprocess, to_backlog = _unpack_collect_result(await self.collect_trajectories(item))
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

    # ------------------------------------------------------------------------------------------------------
    # Main loop
    # ------------------------------------------------------------------------------------------------------
    def _report_progress(self) -> None:
        now = time.monotonic()
        if now < self._next_report_at:
            return
        self._next_report_at = now + REPORT_INTERVAL_S * 2
        logger.info(
            "[%s] step %s, queue %s, %d items collecting, %d being sent, sent %d groups, discarded %s",
            self.env_label,
            self.status_dict.get("current_step"),
            self.status_dict.get("queue_size"),
            len(self.running_items),
            len(self._finishing),
            self.groups_sent_total,
            dict(self.discard_counts) or 0,
        )

    async def _serve_loop(self) -> None:
        while not self._shutdown_requested:
            now = time.monotonic()
            if self.last_loop_time is not None:
                self.mainloop_timings.append(max(0.0, time.time() - self.last_loop_time))
                trim_buffer(self.mainloop_timings)
            self.last_loop_time = time.time()
            if now >= self._next_status_at or not self.status_dict:
                if not await self._refresh_status():
                    continue
                self._next_status_at = time.monotonic() + self.status_interval
            await self.env_step_checks()
            if self.config.batch_size == -1 and now >= self._next_info_at:
                self._next_info_at = now + 5.0
                await self.get_server_info()
            status = self.status_dict
            if should_stop(
                current_step=int(status.get("current_step", 0)),
                queue_size=int(status.get("queue_size", 0)),
                group_size=self.config.group_size,
                batch_size=self.config.batch_size,
                total_steps=self.config.total_steps,
            ):
                logger.info("[%s] reached total_steps=%d; stopping", self.env_label, self.config.total_steps)
                break
            paused = should_pause(
                queue_size=self._queue_estimate,
                self_queue_size=int(status.get("self_queue_size", 0)),
                max_group_size=int(status.get("max_group_size", 1) or 1),
                group_size=self.config.group_size,
                batch_size=self.config.batch_size,
                max_batches_offpolicy=self.config.max_batches_offpolicy,
                min_batch_allocation=self.config.min_batch_allocation,
                derived_batch_size=self.derived_batch_size,
            )
            if not paused and len(self.workers) < self.max_num_workers and not self._too_many_finishing():
                await self.add_train_workers()
            self._reap_timed_out_workers()
            self._report_progress()
            await self._wait_for_wakeup(self.status_interval)

    async def _finish_serve(self) -> None:
        """Stop work, flush what is being sent, disconnect, close files and runs (never raises)."""
        self._shutdown_requested = True
        self._phase = "stopping"
        if self.eval_runner is not None and not self.eval_runner.done():
            self.eval_runner.cancel()
        collecting = [self.running_items.pop(u)["worker"] for u in list(self.running_items)]
        for worker in collecting:
            worker.cancel()
        if collecting:
            await asyncio.gather(*collecting, return_exceptions=True)
        pending = [w for w in [*self.workers, *self._finishing] if not w.done()]
        if pending and not self._stop_now:
            logger.info(
                "[%s] waiting up to %.0f s for %d item(s) being checked or sent",
                self.env_label,
                self.config.shutdown_timeout,
                len(pending),
            )
            _, still = await asyncio.wait(pending, timeout=self.config.shutdown_timeout)
            pending = list(still)
        for worker in pending:
            worker.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if self.env_id is not None and self._api is not None:
            try:
                await asyncio.wait_for(self.api.disconnect_env(self.env_id), 10.0)
                logger.info("[%s] disconnected from the API (env_id %s)", self.env_label, self.env_id)
            except Exception as exc:
                logger.warning("[%s] POST /disconnect-env failed: %s", self.env_label, exc)
        self._finish_wandb_run()
        if self.jsonl_writer is not None:
            self.jsonl_writer.close()
        if self._unsent is not None:
            if self._unsent.count:
                logger.warning(
                    "[%s] %d undelivered payload(s) are saved in %s (resend with: python -m "
                    "atroposlib.envs.serve.api_client resend %s --url %s)",
                    self.env_label,
                    self._unsent.count,
                    self._unsent.path,
                    self._unsent.path,
                    self.config.rollout_server_url,
                )
            self._unsent.close()
        if self._api is not None:
            await self._api.close()
        await self._close_inference_clients()
        logger.info(
            "[%s] stopped: %d groups sent, discarded %s, %d items abandoned",
            self.env_label,
            self.groups_sent_total,
            dict(self.discard_counts) or 0,
            self.items_abandoned,
        )

    async def _close_inference_clients(self) -> None:
        close = getattr(self.server, "close", None)
        if close is None:
            return
        try:
            await close()
        except Exception as exc:
            logger.debug("closing inference clients failed: %s", exc)

    async def env_manager(self) -> None:
        """Run ``serve``: setup, wandb, registration, ``/info``, then the scheduling loop until ``total_steps``
        is reached or a signal/``request_shutdown`` arrives; always finishes with :meth:`_finish_serve`."""
        self._main_task = asyncio.current_task()
        self._wakeup = asyncio.Event()
        self._shutdown_event = asyncio.Event()
        self._shutdown_requested = False
        self._stop_now = False
        self._phase = "startup"
        self._install_signal_handlers()
        try:
            await run_setup(self)
            if not self._shutdown_requested:
                await self.setup_wandb()
            if not self._shutdown_requested:
                await self.register_env()
            if not self._shutdown_requested:
                await self.get_server_info()
            self._phase = "running"
            await self._serve_loop()
        except asyncio.CancelledError:
            if not self._shutdown_requested:
                raise
            current = asyncio.current_task()
            if current is not None and hasattr(current, "uncancel"):
                current.uncancel()
        finally:
            await self._finish_serve()
            self._remove_signal_handlers()
            self._phase = "idle"
            self._wakeup = None
            self._shutdown_event = None
            self._main_task = None


__all__ = ["ServeRuntimeMixin"]
