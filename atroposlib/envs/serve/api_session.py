"""The env's conversation with the trajectory API during ``serve``: registration, ``/info`` and status polls.

:class:`ApiSessionMixin` is part of :class:`~atroposlib.envs.serve.runtime.ServeRuntimeMixin`. Losing the API
is not fatal: status polls back off exponentially and the env registers again when the API no longer knows it.
Registration waits for the trainer, with a progress line every 30 s.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from atroposlib.envs.serve.api_client import ApiRejected, ApiUnavailable
from atroposlib.envs.serve.scheduling import backoff_delay, resolve_max_num_workers

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")

#: Seconds between two progress lines while a wait goes on.
REPORT_INTERVAL_S = 30.0


class RegistrationRefused(RuntimeError):
    """The API answered ``POST /register-env`` with a 4xx: a configuration error (wrong API key, a
    ``group_size`` the trainer's batch cannot hold, ...). The message names the env and the API's reason."""


class ApiSessionMixin:
    """Registration with the trajectory API and the status it reports."""

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
        configuration error and raises :class:`RegistrationRefused` with the API's reason.
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
                raise RegistrationRefused(
                    f"[{self.env_label}] the API refused registration: {exc.reason}"
                ) from exc
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
        """Adopt the trainer's ``batch_size`` and ``max_token_len`` from ``GET /info`` (when not -1), and its
        ``max_staleness`` unless the env set its own.

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
        if info.get("max_staleness") is not None and getattr(self.config, "max_staleness", 0) is None:
            self.config.max_staleness = int(info["max_staleness"])
            logger.info(
                "[%s] the trainer trains rollouts at most %d step(s) old: generating at most %d batch(es) ahead",
                self.env_label, self.config.max_staleness, self.config.max_staleness + 1,
            )  # fmt: skip
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


__all__ = ["REPORT_INTERVAL_S", "ApiSessionMixin"]
