"""The env's conversation with the trajectory API during ``serve``: registration, ``/info`` and status polls.

:class:`ApiSession` belongs to an :class:`~atroposlib.envs.serve.runtime.EnvRunner`; what the API answers is
stored on the runner (``env_id``, ``status_dict``, ``curr_step`` ...) and in the env's config. Losing the API
is not fatal: status polls back off exponentially and the env registers again when the API no longer knows it.
Registration waits for the trainer, with a progress line every 30 s.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Optional

from atroposlib.envs.serve.api_client import ApiRejected, ApiUnavailable
from atroposlib.envs.serve.scheduling import backoff_delay, resolve_max_num_workers

if TYPE_CHECKING:
    from atroposlib.envs.serve.runtime import EnvRunner

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")

#: Seconds between two progress lines while a wait goes on.
REPORT_INTERVAL_S = 30.0


class RegistrationRefused(RuntimeError):
    """The API answered ``POST /register-env`` with a 4xx: a configuration error (wrong API key, a
    ``group_size`` the trainer's batch cannot hold, ...). The message names the env and the API's reason."""


class ApiSession:
    """Registration with the trajectory API and the status it reports, for one :class:`EnvRunner`."""

    def __init__(self, runner: EnvRunner) -> None:
        self.runner = runner
        self.env = runner.env
        self.status_failures = 0

    def registration(self) -> dict[str, Any]:
        """The body of ``POST /register-env`` (``wandb_name`` defaults to the env's name)."""
        config = self.env.config
        if not config.wandb_name:
            config.wandb_name = self.env.name or type(self.env).__name__
        return {
            "max_token_length": config.max_token_length,
            "desired_name": config.wandb_name,
            "weight": config.inference_weight,
            "min_batch_allocation": config.min_batch_allocation,
            "group_size": config.group_size,
        }

    async def _until_accepted(self, registration: dict[str, Any]) -> Optional[dict[str, Any]]:
        """``POST /register-env`` until the API answers success; None when shutdown was requested first."""
        label = self.env.env_label
        shutdown = self.runner.shutdown
        started = time.monotonic()
        next_report = started
        failures = 0
        while not shutdown.requested:
            try:
                data = await self.runner.sender.api.register_env(registration)
                failures = 0
            except ApiRejected as exc:
                raise RegistrationRefused(f"[{label}] the API refused registration: {exc.reason}") from exc
            except ApiUnavailable as exc:
                failures += 1
                delay = backoff_delay(failures, base=1.0)
                logger.warning(
                    "[%s] cannot reach the API at %s (%s); retrying in %.0f s",
                    label,
                    self.env.config.rollout_server_url,
                    exc,
                    delay,
                )
                await shutdown.sleep(delay)
                continue
            if isinstance(data, dict) and data.get("status") == "success":
                return data
            now = time.monotonic()
            if now >= next_report:
                logger.info(
                    "[%s] waiting for the trainer to start (%.0f s so far; API says %r)",
                    label,
                    now - started,
                    (data or {}).get("status") if isinstance(data, dict) else data,
                )
                next_report = now + REPORT_INTERVAL_S
            await shutdown.sleep(1.0)
        return None

    async def register(self) -> None:
        """``POST /register-env`` until the API accepts the env (the default ``register_env``).

        Waits (1 s between tries, a log line every 30 s) while the API answers "wait for trainer to start";
        backs off exponentially (logging each failure) while the API is unreachable. A 4xx answer is a
        configuration error and raises :class:`RegistrationRefused` with the API's reason. On success the
        runner adopts ``env_id``, ``wandb_prepend``, ``curr_step``, ``checkpoint_dir`` and
        ``checkpoint_interval`` (and ``total_steps`` from the trainer's ``num_steps`` when it is -1), and the
        env's ``load_checkpoint`` runs when the trainer is past step 0.
        """
        data = await self._until_accepted(self.registration())
        if data is None:
            return
        runner, config = self.runner, self.env.config
        runner.env_id = data["env_id"]
        runner.wandb_prepend = data.get("wandb_name")
        runner.curr_step = int(data.get("starting_step", 0) or 0)
        runner.checkpoint_dir = data.get("checkpoint_dir", "") or ""
        runner.checkpoint_interval = int(data.get("checkpoint_interval", -1) or -1)
        if config.total_steps == -1:
            num_steps = int(data.get("num_steps", -1))
            if num_steps == -1:
                logger.warning(
                    "[%s] total_steps and the trainer's num_steps are both -1: running until stopped",
                    self.env.env_label,
                )
            config.total_steps = num_steps
        runner.sender.api.label = self.env.env_label
        logger.info(
            "[%s] registered with the API as env_id %s at trainer step %d",
            self.env.env_label,
            runner.env_id,
            runner.curr_step,
        )
        if runner.curr_step > 0:
            self.env.load_checkpoint()

    async def server_info(self) -> None:
        """Adopt the trainer's ``batch_size`` and ``max_token_len`` from ``GET /info`` (when not -1), and its
        ``max_staleness`` unless the env set its own (the default ``get_server_info``).

        Raises ``ValueError`` when ``group_size`` exceeds a known batch size (a group must fit in one batch).
        While the batch size is still unknown nothing is started; the loop asks again every few seconds.
        """
        label, config = self.env.env_label, self.env.config
        try:
            info = await self.runner.sender.api.info()
        except (ApiUnavailable, ApiRejected) as exc:
            logger.warning("[%s] GET /info failed: %s", label, exc)
            return
        if not isinstance(info, dict):
            return
        batch_size = int(info.get("batch_size", -1))
        max_token_len = int(info.get("max_token_len", -1))
        if batch_size != -1:
            config.batch_size = batch_size
        if max_token_len != -1:
            self.runner.max_token_len = max_token_len
        if info.get("max_staleness") is not None and getattr(config, "max_staleness", 0) is None:
            config.max_staleness = int(info["max_staleness"])
            logger.info(
                "[%s] the trainer trains rollouts at most %d step(s) old: generating at most %d batch(es) ahead",
                label, config.max_staleness, config.max_staleness + 1,
            )  # fmt: skip
        if config.batch_size == -1:
            logger.warning("[%s] the trainer's batch size is unknown yet; waiting before generating", label)
        elif config.group_size > config.batch_size:
            raise ValueError(
                f"group_size ({config.group_size}) is larger than the trainer's batch_size "
                f"({config.batch_size}); a group must fit in one batch"
            )

    async def poll_status(self) -> None:
        """``GET /status-env`` into the runner's ``status_dict`` (the default ``get_status``); refreshes
        ``max_num_workers`` and the server weights."""
        runner, env = self.runner, self.env
        status = await runner.sender.api.status_env(runner.env_id)
        if not isinstance(status, dict):
            raise ApiUnavailable(f"unexpected /status-env answer: {status!r}")
        runner.status_dict = status
        runner.sender.groups_sent_since_status = 0
        runner.max_num_workers = resolve_max_num_workers(
            env.config.max_num_workers,
            env.config.max_num_workers_per_node,
            len(getattr(env.server, "servers", None) or []),
        )
        weight = status.get("env_weight")
        update = getattr(env.server, "update_weight", None)
        if weight is not None and update is not None:
            await update(weight)

    async def refresh_status(self) -> bool:
        """The env's ``get_status`` with recovery; True when ``status_dict`` is fresh.

        A rejected poll (the API forgot the env) registers again through the env's ``register_env``; an
        unreachable API backs off exponentially while running work continues."""
        label = self.env.env_label
        try:
            await self.env.get_status()
        except ApiRejected as exc:
            logger.warning(
                "[%s] the API rejected the status poll for env_id %s (%s); registering again",
                label,
                self.runner.env_id,
                exc.reason,
            )
            self.runner.env_id = None
            await self.env.register_env()
            return False
        except Exception as exc:  # ApiUnavailable, or a malformed answer: back off and try again
            self.status_failures += 1
            delay = backoff_delay(self.status_failures)
            logger.warning(
                "[%s] lost contact with the API (%s); retrying in %.1f s (attempt %d; running work continues)",
                label,
                exc,
                delay,
                self.status_failures,
            )
            await self.runner.shutdown.sleep(delay)
            return False
        if self.status_failures:
            logger.info("[%s] reconnected to the API", label)
        self.status_failures = 0
        return True


__all__ = ["REPORT_INTERVAL_S", "ApiSession", "RegistrationRefused"]
