"""Metrics of an environment: Weights & Biases runs, the rollout table, perf stats and evaluation files.

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
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse

import numpy as np

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


class WandbLoggingMixin:
    """``wandb_log`` and friends; part of :class:`~atroposlib.envs.base.BaseEnv`."""

    # -- runs ----------------------------------------------------------------------------------------------
    def _start_wandb_run(self, *, project: Optional[str], group: Optional[str], name: Optional[str]) -> None:
        """Initialise a wandb run for this env (offline without a key). Failures are logged, not raised."""
        ensure_wandb_offline_without_key()
        try:
            import wandb

            self.wandb_run = wandb.init(
                project=project,
                group=group,
                name=name,
                config=self.config.model_dump(mode="json"),
            )
            self._wandb_started = True
        except Exception as exc:  # a broken wandb setup must not stop data generation
            logger.error(
                "[%s] could not start a wandb run (%s); continuing without wandb", self.env_label, exc
            )
            self.config.use_wandb = False

    def _finish_wandb_run(self) -> None:
        if not getattr(self, "_wandb_started", False):
            return
        self._wandb_started = False
        try:
            import wandb

            wandb.finish()
        except Exception as exc:
            logger.warning("[%s] wandb.finish failed: %s", self.env_label, exc)

    def _wandb_active(self) -> bool:
        return bool(self.config.use_wandb) and getattr(self, "_wandb_started", False)

    async def setup_wandb(self) -> None:
        """serve: when ``use_wandb``, wait for the trainer's wandb project on ``GET /wandb_info`` and start a run
        in its project and group, named after ``wandb_name``."""
        if not self.config.use_wandb:
            return
        waited = 0.0
        next_report = 30.0
        while not self._shutdown_requested:
            try:
                info = await self.api.wandb_info()
            except Exception as exc:
                info = None
                logger.warning("[%s] GET /wandb_info failed: %s", self.env_label, exc)
            if isinstance(info, dict) and info.get("project") is not None:
                self.wandb_project = info["project"]
                self.wandb_group = info.get("group")
                break
            if waited >= next_report:
                logger.info(
                    "[%s] waiting for the trainer's wandb project (%.0f s so far)", self.env_label, waited
                )
                next_report += 30.0
            await self._sleep_unless_shutdown(1.0)
            waited += 1.0
        if self._shutdown_requested:
            return
        name = run_name(self.config.wandb_name) if self.config.wandb_name else None
        self._start_wandb_run(project=self.wandb_project, group=self.wandb_group, name=name)

    # -- metrics -------------------------------------------------------------------------------------------
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

    async def create_rollout_table(self, wandb_metrics: dict[str, Any]) -> dict[str, Any]:
        """Add the buffered rollouts as a ``wandb.Table`` (columns text, score) under ``train/rollouts``."""
        if self.rollouts_for_wandb:
            import wandb

            table = wandb.Table(columns=["text", "score"])
            for group in self.rollouts_for_wandb:
                for text, score in group:
                    table.add_data(text, score)
            wandb_metrics["train/rollouts"] = table
        return wandb_metrics

    async def add_rollouts_for_wandb(self, scored_data: Any, item: Any = None) -> None:
        """Keep the first ``num_rollouts_per_group_for_logging`` sequences of a group (decoded, with scores)
        for the rollout table; at most ``num_rollouts_to_keep`` groups are kept (oldest dropped first)."""
        if not self.config.use_wandb:
            return
        keep = self.config.num_rollouts_per_group_for_logging
        tokens = scored_data["tokens"]
        keep = len(tokens) if keep == -1 else min(keep, len(tokens))
        self.rollouts_for_wandb.append(
            [(self.tokenizer.decode(tokens[i]), scored_data["scores"][i]) for i in range(keep)]
        )
        while len(self.rollouts_for_wandb) > self.config.num_rollouts_to_keep:
            self.rollouts_for_wandb.pop(0)

    async def _server_metrics(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for index, server in enumerate(getattr(self.server, "servers", None) or []):
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

    async def wandb_log(self, wandb_metrics: Optional[dict[str, Any]] = None) -> None:
        """Add the base metrics to ``wandb_metrics`` and log them at step ``curr_step``.

        Overrides add their own keys and then ``await super().wandb_log(metrics)``. Base keys: completion
        length statistics (``train/completion_lengths`` mean, ``_std``, ``_max``, ``_min``, ``_p95`` = 95th
        percentile, ``_frac_near_max`` = fraction above 95 % of the trainer's ``max_token_len``), the rollout
        table, perf stats, and ``train/groups_discarded[/<reason>]`` since the last log. Keys are prefixed with
        the API-assigned env name; per-server metrics of every server are added un-prefixed. The buffers are
        cleared even when wandb is off.

        The rollout stats (``train/rollout_reward_mean`` over every rollout generated, including groups
        dropped because their scores were all equal; ``train/kept_reward_mean`` over the groups sent;
        ``train/groups_dropped_equal_scores``; see ``rollout_stats``) are added too, and also written as one
        INFO line, ``rollout stats `` followed by a JSON object with ``step``, so that they reach the console
        and log files when wandb is off.
        """
        metrics: dict[str, Any] = dict(wandb_metrics or {})
        stats = self.rollout_stats() if hasattr(self, "rollout_stats") else {}
        if stats:
            metrics.update(stats)
            logger.info("%s%s", ROLLOUT_STATS_PREFIX, json.dumps({"step": self.curr_step, **stats}))
            self.reset_rollout_stats()
        if self.completion_lengths:
            lengths = np.asarray(self.completion_lengths, dtype=float)
            metrics["train/completion_lengths"] = float(lengths.mean())
            metrics["train/completion_lengths_std"] = float(lengths.std())
            metrics["train/completion_lengths_max"] = float(lengths.max())
            metrics["train/completion_lengths_min"] = float(lengths.min())
            metrics["train/completion_lengths_p95"] = float(np.percentile(lengths, 95))
            if self.max_token_len > 0:
                metrics["train/completion_lengths_frac_near_max"] = float(
                    (lengths > 0.95 * self.max_token_len).mean()
                )
        if self._discards_since_log:
            metrics["train/groups_discarded"] = sum(self._discards_since_log.values())
            for code, count in self._discards_since_log.items():
                metrics[f"train/groups_discarded/{code}"] = count
            self._discards_since_log.clear()
        active = self._wandb_active()
        if active:
            metrics = await self.create_rollout_table(metrics)
        metrics = self.perf_stats(metrics)
        self.rollouts_for_wandb = []
        self.completion_lengths = []
        if not active:
            return
        if self.wandb_prepend is not None:
            metrics = {f"{self.wandb_prepend}_{k}": v for k, v in metrics.items()}
        metrics.update(await self._server_metrics())
        import wandb

        wandb.log(metrics, step=self.curr_step)

    # -- evaluation files ----------------------------------------------------------------------------------
    async def evaluate_log(
        self,
        metrics: dict[str, Any],
        task_name: Optional[str] = None,
        model_name: Optional[str] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
        generation_parameters: Optional[dict[str, Any]] = None,
        samples: Optional[list[dict[str, Any]]] = None,
        verbose: bool = True,
        subtasks: Optional[dict[str, dict[str, Any]]] = None,
    ) -> None:
        """Write evaluation results under ``data_dir_to_save_evals`` (no-op with a warning when unset).

        ``metrics.json`` = ``{"config_general": {model_name, total_evaluation_time_seconds (str),
        generation_parameters ({"max_new_tokens": max_token_length, **given})}, "results":
        {"atropos|<task>|0": metrics, "all": metrics}}``, plus ``"atropos|<task>:<subtask>|0": metrics`` for
        each of ``subtasks`` (lighteval's subtask entries); ``samples.jsonl`` (one JSON object per sample) when
        samples are given. Both hold the latest evaluation; every evaluation is also appended to
        ``metrics_history.jsonl`` with the trainer step, so periodic evals are not lost.
        """
        out_dir = self.config.data_dir_to_save_evals
        if out_dir is None:
            logger.warning(
                "[%s] data_dir_to_save_evals is not set: evaluation results not written", self.env_label
            )
            return
        directory = Path(out_dir)
        directory.mkdir(parents=True, exist_ok=True)
        task_name = task_name or f"{self.name or type(self).__name__}_eval"
        if model_name is None:
            model_name = getattr(self.config, "model_name", None)
        if model_name is None:
            servers = getattr(self.server, "servers", None) or []
            model_name = getattr(getattr(servers[0], "config", None), "model_name", None) if servers else None
        now = time.time()
        start_time = now if start_time is None else start_time
        end_time = now if end_time is None else end_time
        params = {"max_new_tokens": self.config.max_token_length, **(generation_parameters or {})}
        if verbose:
            try:
                from atroposlib.utils.display import display_metrics_table

                display_metrics_table(task_name, metrics, start_time, end_time)
            except ImportError:
                logger.info("[%s] %s: %s", self.env_label, task_name, metrics)
        result = {
            "config_general": {
                "model_name": model_name,
                "total_evaluation_time_seconds": str(end_time - start_time),
                "generation_parameters": params,
            },
            "results": {f"atropos|{task_name}|0": metrics, "all": metrics},
        }
        for subtask, values in (subtasks or {}).items():
            result["results"][f"atropos|{task_name}:{subtask}|0"] = values
        (directory / "metrics.json").write_text(
            json.dumps(result, indent=2, default=_jsonable), encoding="utf-8"
        )
        with open(directory / "metrics_history.jsonl", "a", encoding="utf-8") as fh:
            fh.write(
                json.dumps({"step": self.curr_step, "time": end_time, **result}, default=_jsonable) + "\n"
            )
        logger.info("[%s] evaluation results written to %s", self.env_label, directory / "metrics.json")
        if samples:
            with open(directory / "samples.jsonl", "w", encoding="utf-8") as fh:
                for sample in samples:
                    fh.write(json.dumps(sample, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    for attr in ("tolist", "model_dump", "item"):
        fn = getattr(value, attr, None)
        if callable(fn):
            return fn()
    return str(value)


__all__ = [
    "WandbLoggingMixin",
    "ensure_wandb_offline_without_key",
    "run_name",
    "summary_stats",
    "wandb_has_credentials",
]
