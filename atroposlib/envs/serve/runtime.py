"""The runner of an environment: :class:`EnvRunner` holds an env and runs ``serve`` (the online producer loop).

An :class:`EnvRunner` is built from an environment (``EnvRunner(env)``) and becomes that env's ``runner``: the
env's runtime attributes (``curr_step``, ``status_dict``, ``workers``, ``completion_lengths`` ...) are read
from it and its default runtime methods (``handle_send_to_api``, ``add_train_workers``, ``wandb_log`` ...)
delegate to it. The runner calls the env only through the env's public hooks, so an env that overrides one
of them is the one that runs. One scored group travels::

    EnvRunner.serve -> WorkerPool.add_workers -> env.handle_env -> WorkerPool.collect
      -> env.collect_trajectories -> WorkerPool.finish_item -> env.postprocess_histories
      -> env.handle_send_to_api -> GroupSender.send -> env._send_scored_data_to_api -> GroupSender.deliver
      -> TrajectoryApiClient.send_scored_data

Collaborators: :class:`~atroposlib.envs.serve.workers.WorkerPool` (``pool``),
:class:`~atroposlib.envs.serve.api_session.ApiSession` (``session``),
:class:`~atroposlib.envs.serve.sending.GroupSender` (``sender``),
:class:`~atroposlib.envs.serve.wandb_logging.WandbReporter` (``wandb``) and
:class:`~atroposlib.envs.serve.shutdown.ShutdownControl` (``shutdown``). The ``process`` and ``evaluate``
runners (:mod:`atroposlib.envs.cli.process`) use the same sender and reporter.

On SIGTERM/SIGINT, on reaching ``total_steps`` or on any error, ``serve`` stops starting work, waits up to
``shutdown_timeout`` s for groups being sent (saving any it cannot deliver to the spill file), calls
``POST /disconnect-env``, finishes its wandb run and closes its JSONL file. A second signal stops at once
(undelivered groups are still saved).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

from atroposlib.envs.groups import EvalHandlingEnum
from atroposlib.envs.serve.api_session import REPORT_INTERVAL_S, ApiSession
from atroposlib.envs.serve.jsonl_sink import JsonlWriter
from atroposlib.envs.serve.scheduling import (
    boundary_crossed,
    resolve_max_num_workers,
    should_pause,
    should_stop,
)
from atroposlib.envs.serve.sending import GroupSender, trim_buffer
from atroposlib.envs.serve.setup_errors import EnvSetupError, run_setup
from atroposlib.envs.serve.shutdown import ShutdownControl
from atroposlib.envs.serve.wandb_logging import WandbReporter
from atroposlib.envs.serve.workers import WorkerPool
from atroposlib.envs.server_handling.message_tokens import token_exact_problem

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")


class EnvRunner:
    """Holds one environment and runs it (see the module docstring).

    Run state: ``env_id`` (assigned at registration), ``status_dict`` (the last ``GET /status-env``),
    ``curr_step`` (the trainer step), ``max_token_len`` (the trainer's, -1 unknown), ``wandb_prepend`` (the
    API-assigned env name), ``checkpoint_dir``/``checkpoint_interval``, ``items_sent_this_step``,
    ``eval_runner`` (the running evaluation task) and ``max_num_workers``.
    """

    #: Seconds between two ``GET /status-env`` polls (the loop also wakes whenever a worker finishes).
    status_interval: float = 0.25

    def __init__(self, env: Any) -> None:
        """Build the runner of ``env`` and make it ``env.runner``. Accepted groups are appended to
        ``env.config.data_path_to_save_groups`` when that is set (the file appears with the first group)."""
        self.env = env
        config = env.config
        self.env_id: Optional[int] = None
        self.status_dict: dict[str, Any] = {}
        self.curr_step = 0
        self.max_token_len = -1
        self.wandb_prepend: Optional[str] = None
        self.checkpoint_dir = ""
        self.checkpoint_interval = -1
        self.items_sent_this_step = 0
        self.eval_runner: Optional[asyncio.Task] = None
        self.eval_workers: set[asyncio.Task] = set()
        self.last_loop_time: Optional[float] = None
        self.max_num_workers = resolve_max_num_workers(
            config.max_num_workers,
            config.max_num_workers_per_node,
            len(getattr(env.server, "servers", []) or []),
        )
        path = config.data_path_to_save_groups
        self.shutdown = ShutdownControl(lambda: env.env_label)
        self.sender = GroupSender(self, JsonlWriter(path, mode="w") if path else None)
        self.wandb = WandbReporter(self)
        self.pool = WorkerPool(self)
        self.session = ApiSession(self)
        self._next_status_at = 0.0
        self._next_info_at = 0.0
        self._next_report_at = 0.0
        env.runner = self

    # ------------------------------------------------------------------------------------------------------
    # Steps, evals, checkpoints
    # ------------------------------------------------------------------------------------------------------
    async def _evaluate_in_background(self) -> None:
        try:
            await self.env.evaluate()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.error("[%s] evaluate() failed", self.env.env_label, exc_info=True)

    def _start_evaluation(self, step: int) -> None:
        if self.eval_runner is not None and not self.eval_runner.done():
            logger.warning(
                "[%s] previous evaluation still running at step %d; skipping this one",
                self.env.env_label,
                step,
            )
            return
        self.eval_runner = asyncio.create_task(self._evaluate_in_background())
        if self.env.config.eval_handling == EvalHandlingEnum.STOP_TRAIN:
            self.pool.cancel_collecting(
                list(self.pool.running_items), reason="evaluation started", count_attempt=False
            )

    async def step_checks(self) -> None:
        """React to a new trainer step (the default ``env_step_checks``): start the env's ``evaluate`` / call
        its ``save_checkpoint`` when a multiple of ``steps_per_eval`` / ``checkpoint_interval`` was passed, then
        call its ``wandb_log`` if at least ``min_items_sent_before_logging`` items were sent."""
        env = self.env
        current = self.status_dict.get("current_step") if self.status_dict else None
        if current is None or current == self.curr_step:
            return
        if boundary_crossed(self.curr_step, current, env.config.steps_per_eval) is not None:
            self._start_evaluation(current)
        checkpoint_step = boundary_crossed(self.curr_step, current, self.checkpoint_interval)
        if checkpoint_step is not None:
            try:
                env.save_checkpoint(checkpoint_step)
            except Exception:
                logger.error("[%s] save_checkpoint(%d) failed", env.env_label, checkpoint_step, exc_info=True)
        self.curr_step = current
        if self.items_sent_this_step >= env.config.min_items_sent_before_logging:
            self.items_sent_this_step = 0
            try:
                await env.wandb_log({})
            except Exception:
                logger.error("[%s] wandb_log failed", env.env_label, exc_info=True)

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
            self.env.env_label,
            self.status_dict.get("current_step"),
            self.status_dict.get("queue_size"),
            len(self.pool.running_items),
            len(self.pool.finishing),
            self.sender.groups_sent_total,
            dict(self.sender.discard_counts) or 0,
        )

    def _record_loop_time(self) -> None:
        timings = self.wandb.mainloop_timings
        if self.last_loop_time is not None:
            timings.append(max(0.0, time.time() - self.last_loop_time))
            trim_buffer(timings)
        self.last_loop_time = time.time()

    def _reached_total_steps(self) -> bool:
        status, config = self.status_dict, self.env.config
        return should_stop(
            current_step=int(status.get("current_step", 0)),
            queue_size=int(status.get("queue_size", 0)),
            group_size=config.group_size,
            batch_size=config.batch_size,
            total_steps=config.total_steps,
        )

    def _paused(self) -> bool:
        status, config = self.status_dict, self.env.config
        return should_pause(
            queue_size=self.pool.queue_estimate,
            self_queue_size=int(status.get("self_queue_size", 0)),
            max_group_size=int(status.get("max_group_size", 1) or 1),
            group_size=config.group_size,
            batch_size=config.batch_size,
            max_batches_offpolicy=config.max_batches_offpolicy,
            min_batch_allocation=config.min_batch_allocation,
            derived_batch_size=self.env.derived_batch_size,
        )

    async def _loop(self) -> None:
        env, pool = self.env, self.pool
        while not self.shutdown.requested:
            now = time.monotonic()
            self._record_loop_time()
            if now >= self._next_status_at or not self.status_dict:
                if not await self.session.refresh_status():
                    continue
                self._next_status_at = time.monotonic() + self.status_interval
            await env.env_step_checks()
            if env.config.batch_size == -1 and now >= self._next_info_at:
                self._next_info_at = now + 5.0
                await env.get_server_info()
            if self._reached_total_steps():
                logger.info("[%s] reached total_steps=%d; stopping", env.env_label, env.config.total_steps)
                break
            if (
                not self._paused()
                and len(pool.workers) < self.max_num_workers
                and not pool.too_many_finishing()
            ):
                await env.add_train_workers()
            pool.reap_timed_out()
            self._report_progress()
            await self.shutdown.wait_for_wakeup(self.status_interval)

    async def _drain_workers(self) -> None:
        """Cancel items still collecting; give items being sent up to ``shutdown_timeout`` s to finish."""
        pool = self.pool
        collecting = [pool.running_items.pop(u)["worker"] for u in list(pool.running_items)]
        for worker in collecting:
            worker.cancel()
        if collecting:
            await asyncio.gather(*collecting, return_exceptions=True)
        pending = [w for w in [*pool.workers, *pool.finishing] if not w.done()]
        if pending and not self.shutdown.stop_now:
            timeout = self.env.config.shutdown_timeout
            logger.info(
                "[%s] waiting up to %.0f s for %d item(s) being checked or sent",
                self.env.env_label,
                timeout,
                len(pending),
            )
            _, still = await asyncio.wait(pending, timeout=timeout)
            pending = list(still)
        for worker in pending:
            worker.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _finish(self) -> None:
        """Stop work, flush what is being sent, disconnect, close files and runs (never raises)."""
        label = self.env.env_label
        self.shutdown.requested = True
        self.shutdown.phase = "stopping"
        if self.eval_runner is not None and not self.eval_runner.done():
            self.eval_runner.cancel()
        await self._drain_workers()
        if self.env_id is not None and self.sender.api_started:
            try:
                await asyncio.wait_for(self.sender.api.disconnect_env(self.env_id), 10.0)
                logger.info("[%s] disconnected from the API (env_id %s)", label, self.env_id)
            except Exception as exc:
                logger.warning("[%s] POST /disconnect-env failed: %s", label, exc)
        self.wandb.finish_run()
        await self.sender.close()
        await self.close_inference_clients()
        logger.info(
            "[%s] stopped: %d groups sent, discarded %s, %d items abandoned",
            label,
            self.sender.groups_sent_total,
            dict(self.sender.discard_counts) or 0,
            self.pool.items_abandoned,
        )

    async def close_inference_clients(self) -> None:
        """Close the env's inference clients through its ``_close_inference_clients`` hook (errors are logged
        at debug level, never raised)."""
        try:
            await self.env._close_inference_clients()
        except Exception as exc:
            logger.debug("closing inference clients failed: %s", exc)

    def _require_token_exact_servers(self) -> None:
        """Stop ``serve`` at start-up, in one line, when the environment trains on the inference server's
        token ids (``trains_token_ids``) and a server returns text only (an OpenAI-type endpoint)."""
        manager = getattr(self.env, "server", None)
        if not getattr(self.env, "trains_token_ids", False) or getattr(manager, "use_proxy", False):
            return
        problem = token_exact_problem(list(getattr(manager, "servers", [])))
        if problem is not None:
            raise EnvSetupError(f"{type(self.env).__name__}: {problem}")

    async def _start(self) -> None:
        """The env's ``setup``, then (unless stopped meanwhile) ``setup_wandb``, ``register_env`` and
        ``get_server_info``."""
        env, shutdown = self.env, self.shutdown
        await run_setup(env)
        self._require_token_exact_servers()
        if not shutdown.requested:
            await env.setup_wandb()
        if not shutdown.requested:
            await env.register_env()
        if not shutdown.requested:
            await env.get_server_info()

    async def serve(self) -> None:
        """Run ``serve`` (the default ``env_manager``): setup, wandb, registration, ``/info``, then the
        scheduling loop until ``total_steps`` is reached or a signal/:meth:`request_shutdown` arrives; always
        finishes by draining work, disconnecting and closing files."""
        shutdown = self.shutdown
        shutdown.open(on_stop_now=self.pool.cancel_all)
        try:
            await self._start()
            shutdown.phase = "running"
            await self._loop()
        except asyncio.CancelledError:
            if not shutdown.requested:
                raise
            current = asyncio.current_task()
            if current is not None and hasattr(current, "uncancel"):
                current.uncancel()
        finally:
            await self._finish()
            shutdown.close()

    def request_shutdown(self, reason: str = "requested") -> None:
        """Ask a running :meth:`serve` to stop gracefully (safe to call from the event loop thread)."""
        self.shutdown.request(reason)


__all__ = ["EnvRunner"]
