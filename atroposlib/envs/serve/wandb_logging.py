"""Metrics of an environment: Weights & Biases runs, the rollout table and perf stats.

:class:`WandbReporter` belongs to an :class:`~atroposlib.envs.serve.runtime.EnvRunner`: it holds the wandb run
and the buffers logged by ``BaseEnv.wandb_log`` (completion lengths, rollouts for the table, timings).

wandb is imported only when a run is started. Without an API key (``WANDB_API_KEY`` or a netrc entry) and
without an explicit ``WANDB_MODE``, runs are created in offline mode instead of prompting for a login.
"""

from __future__ import annotations

import json
import logging
import netrc
import os
import random
import string
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlparse

import numpy as np

from atroposlib.envs.serve.sending import trim_buffer

if TYPE_CHECKING:
    from atroposlib.envs.serve.runtime import EnvRunner

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")

#: The start of the log line with an env's rollout stats; a JSON object follows it.
ROLLOUT_STATS_PREFIX = "rollout stats "


def wandb_has_credentials() -> bool:
    """True when a wandb API key is available (environment variable or netrc entry for the wandb host)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def ensure_wandb_offline_without_key() -> str | None:
    """Set ``WANDB_MODE=offline`` when no mode is set and no key is available; returns the effective mode."""
    if not os.environ.get("WANDB_MODE") and not wandb_has_credentials():
        os.environ["WANDB_MODE"] = "offline"
        logger.info("no wandb API key found: wandb runs are offline (set WANDB_API_KEY to sync)")
    return os.environ.get("WANDB_MODE")


def run_name(prefix: Optional[str]) -> str:
    """``{prefix}-{YYYY-MM-DD}-{6 random lowercase letters}``."""
    suffix = "".join(random.choices(string.ascii_lowercase, k=6))
    return f"{prefix}-{datetime.now().strftime('%Y-%m-%d')}-{suffix}"


def summary_stats(prefix: str, values: list[float], metrics: dict[str, Any]) -> None:
    """Add ``{prefix}_mean/_std/_max/_min`` of ``values`` to ``metrics``."""
    arr = np.asarray(values, dtype=float)
    metrics[f"{prefix}_mean"] = float(arr.mean())
    metrics[f"{prefix}_std"] = float(arr.std())
    metrics[f"{prefix}_max"] = float(arr.max())
    metrics[f"{prefix}_min"] = float(arr.min())


class WandbReporter:
    """The wandb run of one :class:`~atroposlib.envs.serve.runtime.EnvRunner` and the buffers it logs.

    Buffers (each emptied by :meth:`log`): ``completion_lengths`` (trained tokens per accepted sequence),
    ``rollouts_for_wandb`` (decoded rollouts for the table), and the timings ``task_duration``,
    ``succeeded_task_duration``, ``failed_task_duration``, ``task_successful``, ``mainloop_timings`` and
    ``workers_added_list``.
    """

    def __init__(self, runner: EnvRunner) -> None:
        self.runner = runner
        self.env = runner.env
        self.run: Any = None
        self.project: Optional[str] = None
        self.group: Optional[str] = None
        self.started = False
        self.rollouts_for_wandb: list = []
        self.completion_lengths: list[int] = []
        self.task_duration: list[float] = []
        self.succeeded_task_duration: list[float] = []
        self.failed_task_duration: list[float] = []
        self.task_successful: list[bool] = []
        self.mainloop_timings: list[float] = []
        self.workers_added_list: list[int] = []

    # -- runs ----------------------------------------------------------------------------------------------
    def start_run(self, *, project: Optional[str], group: Optional[str], name: Optional[str]) -> None:
        """Initialise a wandb run for the env (offline without a key). Failures are logged, not raised."""
        ensure_wandb_offline_without_key()
        try:
            import wandb

            self.run = wandb.init(
                project=project,
                group=group,
                name=name,
                config=self.env.config.model_dump(mode="json"),
            )
            self.started = True
        except Exception as exc:  # a broken wandb setup must not stop data generation
            logger.error(
                "[%s] could not start a wandb run (%s); continuing without wandb", self.env.env_label, exc
            )
            self.env.config.use_wandb = False

    def finish_run(self) -> None:
        """Finish the run :meth:`start_run` started (nothing when none is running)."""
        if not self.started:
            return
        self.started = False
        try:
            import wandb

            wandb.finish()
        except Exception as exc:
            logger.warning("[%s] wandb.finish failed: %s", self.env.env_label, exc)

    def active(self) -> bool:
        """Whether metrics go to a wandb run: ``use_wandb`` is on and a run was started."""
        return bool(self.env.config.use_wandb) and self.started

    async def join_trainer_run(self) -> None:
        """serve: when ``use_wandb``, wait for the trainer's wandb project on ``GET /wandb_info`` and start a run
        in its project and group, named after ``wandb_name``."""
        config = self.env.config
        if not config.use_wandb:
            return
        shutdown = self.runner.shutdown
        waited = 0.0
        next_report = 30.0
        while not shutdown.requested:
            try:
                info = await self.runner.sender.api.wandb_info()
            except Exception as exc:
                info = None
                logger.warning("[%s] GET /wandb_info failed: %s", self.env.env_label, exc)
            if isinstance(info, dict) and info.get("project") is not None:
                self.project = info["project"]
                self.group = info.get("group")
                break
            if waited >= next_report:
                logger.info(
                    "[%s] waiting for the trainer's wandb project (%.0f s so far)", self.env.env_label, waited
                )
                next_report += 30.0
            await shutdown.sleep(1.0)
            waited += 1.0
        if shutdown.requested:
            return
        name = run_name(config.wandb_name) if config.wandb_name else None
        self.start_run(project=self.project, group=self.group, name=name)

    # -- buffers -------------------------------------------------------------------------------------------
    def record_task(self, started: float, success: bool) -> None:
        """Record how long one item took (from ``started``, a ``time.time()``) and whether it produced groups."""
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

    def perf_stats(self, metrics_dict: dict[str, Any]) -> dict[str, Any]:
        """Add timing statistics of finished items, main-loop iterations and worker top-ups; clears them."""
        if len(self.task_duration) > 1:
            summary_stats("train_perf/task_duration", self.task_duration, metrics_dict)
            self.task_duration = []
        if len(self.succeeded_task_duration) > 1:
            summary_stats("train_perf/succeeded_task_duration", self.succeeded_task_duration, metrics_dict)
            metrics_dict["train/items_sent_to_api"] = len(self.succeeded_task_duration)
            self.succeeded_task_duration = []
        if len(self.failed_task_duration) > 1:
            summary_stats("train_perf/failed_task_duration", self.failed_task_duration, metrics_dict)
            metrics_dict["train/items_rejected"] = len(self.failed_task_duration)
            self.failed_task_duration = []
        if len(self.mainloop_timings) > 1:
            summary_stats("train_perf/mainloop_timings", self.mainloop_timings, metrics_dict)
            self.mainloop_timings = []
        if len(self.workers_added_list) > 1:
            summary_stats("train_perf/workers_added_per_attempt", self.workers_added_list, metrics_dict)
            self.workers_added_list = []
        return metrics_dict

    def rollout_table(self, wandb_metrics: dict[str, Any]) -> dict[str, Any]:
        """Add the buffered rollouts as a ``wandb.Table`` (columns text, score) under ``train/rollouts``."""
        if self.rollouts_for_wandb:
            import wandb

            table = wandb.Table(columns=["text", "score"])
            for group in self.rollouts_for_wandb:
                for text, score in group:
                    table.add_data(text, score)
            wandb_metrics["train/rollouts"] = table
        return wandb_metrics

    def keep_rollouts(self, scored_data: Any) -> None:
        """Keep the first ``num_rollouts_per_group_for_logging`` sequences of a group (decoded, with scores)
        for the rollout table; at most ``num_rollouts_to_keep`` groups are kept (oldest dropped first)."""
        config = self.env.config
        if not config.use_wandb:
            return
        keep = config.num_rollouts_per_group_for_logging
        tokens = scored_data["tokens"]
        keep = len(tokens) if keep == -1 else min(keep, len(tokens))
        self.rollouts_for_wandb.append(
            [(self.env.tokenizer.decode(tokens[i]), scored_data["scores"][i]) for i in range(keep)]
        )
        while len(self.rollouts_for_wandb) > config.num_rollouts_to_keep:
            self.rollouts_for_wandb.pop(0)

    # -- logging -------------------------------------------------------------------------------------------
    async def _server_metrics(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for index, server in enumerate(getattr(self.env.server, "servers", None) or []):
            collect = getattr(server, "wandb_metrics", None)
            if collect is None:
                continue
            try:
                result = collect({}, f"server_{index}")
                if hasattr(result, "__await__"):
                    result = await result
                merged.update(result or {})
            except Exception as exc:
                logger.debug("server %d metrics unavailable: %s", index, exc)
        return merged

    def _completion_length_metrics(self, metrics: dict[str, Any]) -> None:
        lengths = np.asarray(self.completion_lengths, dtype=float)
        metrics["train/completion_lengths"] = float(lengths.mean())
        metrics["train/completion_lengths_std"] = float(lengths.std())
        metrics["train/completion_lengths_max"] = float(lengths.max())
        metrics["train/completion_lengths_min"] = float(lengths.min())
        metrics["train/completion_lengths_p95"] = float(np.percentile(lengths, 95))
        max_token_len = self.runner.max_token_len
        if max_token_len > 0:
            metrics["train/completion_lengths_frac_near_max"] = float((lengths > 0.95 * max_token_len).mean())

    async def log(self, wandb_metrics: Optional[dict[str, Any]] = None) -> None:
        """Add the base metrics to ``wandb_metrics`` and log them at the runner's ``curr_step``.

        Base keys: completion length statistics (``train/completion_lengths`` mean, ``_std``, ``_max``,
        ``_min``, ``_p95`` = 95th percentile, ``_frac_near_max`` = fraction above 95 % of the trainer's
        ``max_token_len``), the env's ``create_rollout_table``, the env's ``perf_stats``, and
        ``train/groups_discarded[/<reason>]`` since the last log. Keys are prefixed with the API-assigned env
        name; per-server metrics of every server are added un-prefixed. The buffers are cleared even when
        wandb is off.

        The rollout stats (``train/rollout_reward_mean`` over every rollout generated, including groups
        dropped because their scores were all equal; ``train/kept_reward_mean`` over the groups sent;
        ``train/groups_dropped_equal_scores``; see :class:`~atroposlib.envs.serve.sending.RolloutStats`) are
        added too, and also written as one INFO line, ``rollout stats `` followed by a JSON object with
        ``step``, so that they reach the console and log files when wandb is off.
        """
        runner, sender = self.runner, self.runner.sender
        metrics: dict[str, Any] = dict(wandb_metrics or {})
        stats = sender.stats.metrics()
        if stats:
            metrics.update(stats)
            logger.info("%s%s", ROLLOUT_STATS_PREFIX, json.dumps({"step": runner.curr_step, **stats}))
            sender.stats.reset()
        if self.completion_lengths:
            self._completion_length_metrics(metrics)
        if sender.discards_since_log:
            metrics["train/groups_discarded"] = sum(sender.discards_since_log.values())
            for code, count in sender.discards_since_log.items():
                metrics[f"train/groups_discarded/{code}"] = count
            sender.discards_since_log.clear()
        active = self.active()
        if active:
            metrics = await self.env.create_rollout_table(metrics)
        metrics = self.env.perf_stats(metrics)
        self.rollouts_for_wandb = []
        self.completion_lengths = []
        if not active:
            return
        if runner.wandb_prepend is not None:
            metrics = {f"{runner.wandb_prepend}_{k}": v for k, v in metrics.items()}
        metrics.update(await self._server_metrics())
        import wandb

        wandb.log(metrics, step=runner.curr_step)


__all__ = [
    "ROLLOUT_STATS_PREFIX",
    "WandbReporter",
    "ensure_wandb_offline_without_key",
    "run_name",
    "summary_stats",
    "wandb_has_credentials",
]
