"""The ``serve`` runtime: startup, the scheduling loop, step-triggered evaluations and checkpoints, shutdown.

:class:`ServeRuntimeMixin` is part of :class:`~atroposlib.envs.base.BaseEnv`. It drives the item workers of
:mod:`~atroposlib.envs.serve.workers` and talks to the API through :mod:`~atroposlib.envs.serve.api_session`.
On SIGTERM/SIGINT, on reaching ``total_steps`` or on any error, the env stops starting work, waits up to
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
from typing import Any, Optional

from atroposlib.envs.groups import EvalHandlingEnum
from atroposlib.envs.serve.api_session import REPORT_INTERVAL_S, ApiSessionMixin
from atroposlib.envs.serve.scheduling import boundary_crossed, should_pause, should_stop
from atroposlib.envs.serve.sending import trim_buffer
from atroposlib.envs.serve.setup_errors import EnvSetupError, run_setup
from atroposlib.envs.serve.workers import WorkerPoolMixin
from atroposlib.envs.server_handling.message_tokens import token_exact_problem

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")


class ServeRuntimeMixin(ApiSessionMixin, WorkerPoolMixin):
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

    def _require_token_exact_servers(self) -> None:
        """Stop ``serve`` at start-up, in one line, when the environment trains on the inference server's
        token ids (``trains_token_ids``) and a server returns text only (an OpenAI-type endpoint)."""
        manager = getattr(self, "server", None)
        if not getattr(self, "trains_token_ids", False) or getattr(manager, "use_proxy", False):
            return
        problem = token_exact_problem(list(getattr(manager, "servers", [])))
        if problem is not None:
            raise EnvSetupError(f"{type(self).__name__}: {problem}")

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
            self._require_token_exact_servers()
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
