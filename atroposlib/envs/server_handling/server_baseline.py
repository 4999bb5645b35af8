"""Configuration models of inference servers and the abstract per-backend client :class:`APIServer`.

* :class:`ServerBaseline` / :class:`APIServerConfig` - how to reach a server and how hard to use it;
  :class:`ReasoningConfig` - the thinking/reasoning settings sent with each request.
* :class:`APIServer` - one inference server: requests are bounded by a weighted semaphore
  (:class:`~atroposlib.envs.server_handling.weighted_semaphore.AsyncSemWithAdaptiveWeight`), retried at most
  ``APIServer.max_attempts`` times (default 3) and only on transient failures (the caller gets the exception
  that was raised, unwrapped). While a server is unhealthy, requests wait for it to recover for at most ``config.timeout``
  seconds (or ``unavailable_grace`` seconds after it stopped answering, when set), then fail with
  :class:`ServerUnavailableError`; health checks use cheap endpoints. The wait is logged when it starts and
  every ``unhealthy_report_interval`` seconds (server, how long, last error, what to check). Metric buffers
  are bounded by ``rolling_buffer_length``.

compat: names and defaults are those of atroposlib 0.4.0's module, ``AsyncSemWithAdaptiveWeight`` included.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional

import numpy as np
from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion
from pydantic import BaseModel, Field, model_validator
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from atroposlib.envs.server_handling.errors import (
    ServerUnavailableError,
    describe_failure,
    is_connection_failure,
    is_retryable,
)
from atroposlib.envs.server_handling.weighted_semaphore import AsyncSemWithAdaptiveWeight, Listeners

logger = logging.getLogger(__name__)

#: Accepted values of ``ReasoningConfig.effort``.
VALID_REASONING_EFFORTS = {"none", "minimal", "low", "medium", "high", "xhigh"}


@dataclass
class ReasoningConfig:
    """Reasoning ("thinking") settings injected into chat requests as ``extra_body``.

    Setting ``effort`` or ``max_tokens`` turns ``enabled`` on. ``effort`` must be one of
    :data:`VALID_REASONING_EFFORTS` (``ValueError`` otherwise).
    """

    enabled: bool = False
    effort: Optional[str] = None
    max_tokens: Optional[int] = None

    #: Approximate reasoning-token budgets per effort level (share of a 32k budget).
    EFFORT_TO_MAX_TOKENS: ClassVar[dict[str, int]] = {
        "none": 1024,
        "minimal": 3200,
        "low": 6400,
        "medium": 16000,
        "high": 25600,
        "xhigh": 30400,
    }

    def __post_init__(self) -> None:
        if self.effort is not None and self.effort not in VALID_REASONING_EFFORTS:
            raise ValueError(
                f"Invalid reasoning_effort: {self.effort!r}. Must be one of: {sorted(VALID_REASONING_EFFORTS)}"
            )
        if self.effort is not None or self.max_tokens is not None:
            self.enabled = True

    def is_reasoning_kwargs_active(self) -> bool:
        """Whether reasoning parameters should be sent at all."""
        return self.enabled

    def build_extra_body(
        self, base_url: Optional[str] = None, use_max_tokens: bool = False
    ) -> Optional[dict[str, Any]]:
        """The ``extra_body`` fragment for a request to ``base_url``, or None when inactive.

        The official OpenAI endpoint takes a top-level ``reasoning_effort`` (default "medium");
        other providers (OpenRouter style) take ``{"reasoning": {"enabled": True, ...}}`` with exactly
        one of ``effort`` or ``max_tokens`` (effort wins; with ``use_max_tokens`` the effort is
        converted to a token budget).
        """
        if not self.is_reasoning_kwargs_active():
            return None
        if base_url and "api.openai.com" in base_url:
            return {"reasoning_effort": self.effort or "medium"}
        reasoning: dict[str, Any] = {"enabled": True}
        if use_max_tokens and self.effort is not None:
            reasoning["max_tokens"] = self.EFFORT_TO_MAX_TOKENS.get(self.effort, 8192)
        elif self.effort is not None:
            reasoning["effort"] = self.effort
        elif self.max_tokens is not None:
            reasoning["max_tokens"] = self.max_tokens
        return {"reasoning": reasoning}

    @classmethod
    def from_env_config(cls, env_config: Any) -> ReasoningConfig:
        """Build from an env config's ``thinking_mode``, ``reasoning_effort``, ``max_reasoning_tokens``."""
        thinking_mode = bool(getattr(env_config, "thinking_mode", False))
        effort = getattr(env_config, "reasoning_effort", None)
        max_tokens = getattr(env_config, "max_reasoning_tokens", None)
        enabled = thinking_mode or effort is not None or max_tokens is not None
        return cls(enabled=enabled, effort=effort, max_tokens=max_tokens)


def _warn_unknown_keys(cls: type[BaseModel], data: Any) -> None:
    if isinstance(data, dict):
        unknown = sorted(str(k) for k in data if k not in cls.model_fields)
        if unknown:
            warnings.warn(
                f"{cls.__name__}: ignoring unknown field(s) {', '.join(unknown)}",
                UserWarning,
                stacklevel=4,
            )


class ServerBaseline(BaseModel):
    """Settings shared by every inference server.

    Passed on its own to ``ServerManager`` it means "discover the servers": SLURM nodes when
    ``$SLURM_JOB_NODELIST`` is set, else ``http://localhost:9004..9007/v1``. Unknown keys are
    ignored with a warning.
    """

    timeout: int = Field(default=1200, description="Request timeout in seconds.")
    num_max_requests_at_once: int = Field(
        default=512,
        ge=1,
        description="Maximum number of concurrent training requests per server. You should divide this by the n kwarg.",
    )
    num_requests_for_eval: int = Field(
        default=64, ge=1, description="Maximum number of concurrent evaluation requests per server."
    )
    model_name: str = Field(default="default", description="Model name sent with every request.")
    rolling_buffer_length: int = Field(
        default=1000, ge=1, description="Length of the rolling buffers that hold request metrics."
    )
    server_type: Literal["openai", "trl", "sglang", "vllm"] = Field(
        default="openai", description="Backend type: openai, trl, sglang or vllm."
    )
    tokenizer_name: str = Field(
        default="none", description="Tokenizer for the vllm/sglang/trl backends; 'none' uses model_name."
    )

    @model_validator(mode="before")
    @classmethod
    def _warn_extra(cls, data: Any) -> Any:
        _warn_unknown_keys(cls, data)
        return data


class APIServerConfig(ServerBaseline):
    """One concrete inference server."""

    api_key: Optional[str] = Field(default="", description="API key for the server.")
    base_url: Optional[str] = Field(
        default="", description="Base URL of the server (OpenAI style, ending in /v1)."
    )
    n_kwarg_is_ignored: bool = Field(
        default=False, description="Whether the server ignores the n kwarg (then n requests are sent)."
    )
    health_check: bool = Field(
        default=True, description="Whether to check the server's health in the background."
    )
    servers_file: Optional[str] = Field(
        default=None,
        description="File listing the inference servers' base URLs (one a line, or a YAML list), written by "
        "whoever starts them, e.g. the trainer; used instead of base_url and followed while the environment "
        "runs, so that a server restarted on another port is found. The other settings apply to each server.",
    )


def require_base_url(config: ServerBaseline, server_type: str) -> None:
    """ValueError unless ``config.base_url`` is set (self-hosted backends have no default URL)."""
    if not getattr(config, "base_url", None):
        raise ValueError(
            f"server_type {server_type!r} needs base_url (e.g. http://host:port/v1); got {getattr(config, 'base_url', None)!r}"
        )


def resolved_tokenizer_name(config: ServerBaseline) -> str:
    """``config.tokenizer_name`` unless it is "none"/empty, else ``config.model_name``."""
    name = config.tokenizer_name
    return config.model_name if not name or name.lower() == "none" else name


class APIServer(ABC):
    """Client for one inference server: concurrency limits, health, retries and metrics.

    Subclasses implement the backend hooks ``_chat_completion_wrapper``, ``_completion_wrapper``,
    ``_tokens_and_logprobs_completion_wrapper`` (and optionally ``_get_logprobs_wrapper``) plus
    ``check_server_status_task``. The public methods accept OpenAI-style keyword arguments and a
    ``split`` kwarg: ``"train"`` (default) uses ``sem`` and the training metrics, anything else
    uses ``eval_sem`` and the evaluation metrics.
    """

    #: Attempts per request (first try included); only transient errors are retried.
    max_attempts: int = 3
    #: Randomised exponential backoff between attempts: multiplier and cap, seconds.
    retry_wait_multiplier: float = 1.0
    retry_wait_max: float = 10.0
    #: Seconds between health probes while healthy, and the cap of the backoff while unhealthy.
    health_check_interval: float = 5.0
    health_check_max_backoff: float = 5.0
    #: Timeout of one health probe, seconds.
    health_probe_timeout: float = 5.0
    #: Seconds between two log lines while the server is not answering.
    unhealthy_report_interval: float = 15.0

    def __init__(self, config: APIServerConfig, reasoning_config: Optional[ReasoningConfig] = None):
        self.config = config
        self.reasoning_config = reasoning_config
        self.sem = AsyncSemWithAdaptiveWeight(config.num_max_requests_at_once)
        self.eval_sem = AsyncSemWithAdaptiveWeight(config.num_requests_for_eval)
        self._server_healthy = True
        maxlen = max(1, int(getattr(config, "rolling_buffer_length", 1000) or 1000))
        self.attempts_list: collections.deque[int] = collections.deque(maxlen=maxlen)
        self.request_timings: collections.deque[float] = collections.deque(maxlen=maxlen)
        self.eval_attempts_list: collections.deque[int] = collections.deque(maxlen=maxlen)
        self.eval_request_timings: collections.deque[float] = collections.deque(maxlen=maxlen)
        self.failed_requests = 0
        self.check_task: Optional[asyncio.Task] = None
        self.initialized = False
        self._listeners = Listeners()
        self._recheck: Optional[asyncio.Event] = None
        self._warned_model_override = False
        #: ``time.monotonic()`` when the server stopped answering; None while healthy.
        self.unhealthy_since: Optional[float] = None
        #: Why the last request or health probe failed (one line), for log lines and errors.
        self.last_failure: Optional[str] = None
        #: When set, requests stop waiting for an unhealthy server this many seconds after it stopped
        #: answering (instead of ``config.timeout`` after they started).
        self.unavailable_grace: Optional[float] = None
        self._next_unhealthy_report = 0.0
        #: Set by :meth:`retire`: the server left its manager's list (e.g. it moved to another address).
        self.retired = False
        #: The tasks with a request to this server being sent or awaiting an answer; :meth:`retire` cancels
        #: them (those it cancelled are in ``_cancelled_by_retire``) and their request fails over.
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._cancelled_by_retire: set[asyncio.Task[Any]] = set()

    # -- health ------------------------------------------------------------------------------------
    @property
    def server_healthy(self) -> bool:
        """Whether the server is believed reachable; requests wait (bounded) while it is not."""
        return self._server_healthy

    @server_healthy.setter
    def server_healthy(self, value: bool) -> None:
        changed = bool(value) != self._server_healthy
        self._server_healthy = bool(value)
        if changed:
            if not value:
                self.unhealthy_since = time.monotonic()
                self._next_unhealthy_report = self.unhealthy_since + self.unhealthy_report_interval
                logger.warning(
                    "inference server %s is not answering (%s); requests wait for it. %s",
                    self._describe(),
                    self.last_failure or "health check failed",
                    self._what_to_check(),
                )
            else:
                down_for = time.monotonic() - self.unhealthy_since if self.unhealthy_since else 0.0
                self.unhealthy_since = None
                logger.info(
                    "inference server %s is answering again (after %.0f s)", self._describe(), down_for
                )
            self._listeners.notify()

    def _what_to_check(self) -> str:
        listed_in = getattr(self.config, "servers_file", None)
        if listed_in:
            return f"Check that it is running, or that {listed_in} (--openai.servers_file) lists where it runs now."
        return "Check that it is running and reachable at this base_url (--openai.base_url)."

    def unhealthy_for(self) -> float:
        """Seconds since the server stopped answering (0.0 while healthy)."""
        if self._server_healthy or self.unhealthy_since is None:
            return 0.0
        return max(0.0, time.monotonic() - self.unhealthy_since)

    def unavailable_message(self) -> str:
        """One line saying which server is down, for how long, why, and what to check."""
        return (
            f"inference server {self._describe()} has not answered for {self.unhealthy_for():.0f} s "
            f"({self.last_failure or 'health check failed'}). {self._what_to_check()}"
        )

    def _report_unhealthy(self) -> None:
        """Log the ongoing wait every ``unhealthy_report_interval`` seconds while unhealthy."""
        now = time.monotonic()
        if self._server_healthy or now < self._next_unhealthy_report:
            return
        self._next_unhealthy_report = now + self.unhealthy_report_interval
        logger.warning("still waiting: %s", self.unavailable_message())

    def _describe(self) -> str:
        return getattr(self.config, "base_url", None) or type(self).__name__

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on health changes and on every semaphore release/weight change."""
        self._listeners.add(callback)
        self.sem.add_listener(callback)
        self.eval_sem.add_listener(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.discard(callback)
        self.sem.remove_listener(callback)
        self.eval_sem.remove_listener(callback)

    def _health_checks_enabled(self) -> bool:
        return (
            bool(getattr(self.config, "health_check", False))
            and getattr(self.config, "base_url", None) is not None
        )

    def _ensure_started(self, chat_completion: bool) -> None:
        """Start the background health check on first use (and again after an event-loop change)."""
        task = self.check_task
        loop = asyncio.get_running_loop()
        if self.initialized and (task is None or task.get_loop() is loop):
            return
        if self._health_checks_enabled():
            self.check_task = loop.create_task(self.check_server_status_task(chat_completion=chat_completion))
        else:
            self.server_healthy = True
            self.check_task = None
        self.initialized = True

    @abstractmethod
    async def check_server_status_task(self, chat_completion: bool = True):
        """Long-running task keeping ``server_healthy`` up to date (see :meth:`_health_check_loop`)."""

    async def _probe_health(self) -> bool:
        """One cheap health probe; True when the server answers. Backends override this."""
        return True

    async def _health_check_loop(self) -> None:
        """Probe periodically: every ``health_check_interval`` s while healthy, with a backoff
        (0.25 s doubling up to ``health_check_max_backoff``) while not, and immediately when a
        request reports a connection failure."""
        backoff = 0.25
        self._recheck = asyncio.Event()
        while True:
            try:
                healthy = await self._probe_health()
                if not healthy:
                    self.last_failure = "its health check answered with a server error"
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a probe must never kill the loop
                logger.debug("health probe of %s failed: %r", self._describe(), exc)
                self.last_failure = describe_failure(exc)
                healthy = False
            self.server_healthy = healthy
            if healthy:
                backoff = 0.25
                interval = self.health_check_interval
            else:
                self._report_unhealthy()
                interval = min(backoff, self.unhealthy_report_interval)
                backoff = min(backoff * 2, self.health_check_max_backoff)
            self._recheck.clear()
            try:
                await asyncio.wait_for(self._recheck.wait(), timeout=interval)
            except asyncio.TimeoutError:
                pass

    def _request_recheck(self) -> None:
        if self._recheck is not None:
            self._recheck.set()

    async def _wait_until_healthy(self, deadline: float) -> None:
        """Return once the server is healthy.

        Raises ServerUnavailableError at ``deadline`` (loop time) or, when ``unavailable_grace`` is set,
        once the server has not answered for that many seconds.
        """
        if self.server_healthy:
            return
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()
        self._listeners.add(changed.set)
        try:
            while True:
                changed.clear()
                if self.server_healthy:
                    return
                remaining = deadline - loop.time()
                if self.unavailable_grace is not None:
                    remaining = min(remaining, self.unavailable_grace - self.unhealthy_for())
                if remaining <= 0:
                    raise ServerUnavailableError(self.unavailable_message())
                try:
                    await asyncio.wait_for(changed.wait(), timeout=remaining)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._listeners.discard(changed.set)

    # -- weights and metrics ---------------------------------------------------------------------
    async def update_weight(self, weight: float) -> None:
        """Set this environment's share of the server on both semaphores."""
        self.sem.update_weight(weight)
        self.eval_sem.update_weight(weight)

    async def wandb_metrics(self, metrics_dict: Optional[dict], server_name: Optional[str]) -> dict:
        """Add request-time and attempt statistics (over the rolling buffers) to ``metrics_dict``.

        Keys: ``server/{name}_request_time_{avg,std,99p}``, ``server/{name}_eval_request_time_{...}``,
        ``server/{name}_average_num_attempts``, ``server/{name}_eval_retry_rate``.
        """
        metrics_dict = {} if metrics_dict is None else metrics_dict
        name = server_name or "server"
        if self.request_timings:
            timings = np.asarray(self.request_timings, dtype=float)
            metrics_dict[f"server/{name}_request_time_avg"] = float(timings.mean())
            metrics_dict[f"server/{name}_request_time_std"] = float(timings.std())
            metrics_dict[f"server/{name}_request_time_99p"] = float(np.percentile(timings, 99))
        if self.eval_request_timings:
            timings = np.asarray(self.eval_request_timings, dtype=float)
            metrics_dict[f"server/{name}_eval_request_time_avg"] = float(timings.mean())
            metrics_dict[f"server/{name}_eval_request_time_std"] = float(timings.std())
            metrics_dict[f"server/{name}_eval_request_time_99p"] = float(np.percentile(timings, 99))
        if self.attempts_list:
            metrics_dict[f"server/{name}_average_num_attempts"] = float(np.mean(self.attempts_list))
        if self.eval_attempts_list:
            metrics_dict[f"server/{name}_eval_retry_rate"] = float(np.mean(self.eval_attempts_list))
        return metrics_dict

    # -- backend hooks -----------------------------------------------------------------------------
    @abstractmethod
    async def _chat_completion_wrapper(self, **kwargs) -> ChatCompletion:
        """Perform one chat completion request on the backend."""

    @abstractmethod
    async def _completion_wrapper(self, **kwargs) -> Completion:
        """Perform one text completion request on the backend."""

    @abstractmethod
    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs) -> tuple[list, list, list, list]:
        """Return ``(prompt_tokens, output_tokens_per_choice, output_logprobs_per_choice, finish_reasons)``."""

    async def _get_logprobs_wrapper(self, **kwargs) -> dict[str, Any]:
        """Return ``{"prompt_tokens", "prompt_topk_token_ids", "prompt_topk_logprobs"}``."""
        raise NotImplementedError(f"{type(self).__name__} does not support get_logprobs (prompt logprobs).")

    # -- request plumbing --------------------------------------------------------------------------
    def _inject_reasoning_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Merge the reasoning ``extra_body`` into a chat request (unless ``skip_reasoning=True``).

        For api.openai.com also force ``temperature=1.0`` and send ``max_completion_tokens``.
        """
        if kwargs.pop("skip_reasoning", False):
            return kwargs
        if self.reasoning_config is None or not self.reasoning_config.is_reasoning_kwargs_active():
            return kwargs
        base_url = getattr(self.config, "base_url", None)
        extra = self.reasoning_config.build_extra_body(base_url)
        if extra:
            kwargs["extra_body"] = {**(kwargs.get("extra_body") or {}), **extra}
        if base_url and "api.openai.com" in base_url:
            kwargs["temperature"] = 1.0
            if kwargs.get("max_tokens"):
                kwargs["max_completion_tokens"] = kwargs.pop("max_tokens")
        return kwargs

    def _prepare(self, kwargs: dict[str, Any], chat_completion: bool) -> tuple[str, dict[str, Any]]:
        self._ensure_started(chat_completion)
        supplied = kwargs.get("model")
        if supplied is not None and supplied != self.config.model_name and not self._warned_model_override:
            # compat: the configured model name always wins, as in atroposlib 0.4.0.
            logger.warning(
                "model=%r passed to %s is replaced by the configured model_name %r",
                supplied,
                type(self).__name__,
                self.config.model_name,
            )
            self._warned_model_override = True
        kwargs["model"] = self.config.model_name
        split = kwargs.pop("split", "train")
        return split, kwargs

    async def _call(self, wrapper: Callable[..., Awaitable[Any]], split: str, kwargs: dict[str, Any]) -> Any:
        """Run ``wrapper(**kwargs)`` under the split's semaphore with health wait, retries, metrics."""
        is_train = split == "train"
        sem = self.sem if is_train else self.eval_sem
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(self.config.timeout)
        stats = {"attempts": 0, "start": None}

        async def attempt_once() -> Any:
            await self._wait_until_healthy(deadline)
            async with sem:
                if stats["start"] is None:
                    stats["start"] = time.monotonic()
                stats["attempts"] += 1
                try:
                    return await wrapper(**dict(kwargs))
                except Exception as exc:
                    if is_connection_failure(exc):
                        self.last_failure = describe_failure(exc)
                        if self._health_checks_enabled():
                            self._request_recheck()
                    raise

        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, self.max_attempts)),
            wait=wait_random_exponential(multiplier=self.retry_wait_multiplier, max=self.retry_wait_max),
            retry=retry_if_exception(is_retryable),
            reraise=True,
            before_sleep=self._log_retry,
        )
        # The request runs in the caller's task (its semaphore slot is taken before the caller yields, which
        # the manager's routing relies on); retire() cancels that task, and the cancel becomes a failure here.
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
        try:
            result = await retrying(attempt_once)
        except asyncio.CancelledError:
            self.failed_requests += 1
            if task is not None and task in self._cancelled_by_retire:
                self._cancelled_by_retire.discard(task)
                uncancel = getattr(task, "uncancel", None)  # Python >= 3.11 counts pending cancels
                if uncancel is not None:
                    uncancel()
                raise ServerUnavailableError(f"{self._describe()} was retired while a request ran") from None
            raise
        except BaseException:
            self.failed_requests += 1
            raise
        finally:
            if task is not None:
                self._in_flight.discard(task)
        elapsed = time.monotonic() - (stats["start"] or time.monotonic())
        if is_train:
            self.request_timings.append(elapsed)
            self.attempts_list.append(stats["attempts"])
        else:
            self.eval_request_timings.append(elapsed)
            self.eval_attempts_list.append(stats["attempts"])
        return result

    def _log_retry(self, retry_state) -> None:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        # A server that cannot be reached is reported by the health check (once, then at intervals).
        quiet = exc is not None and is_connection_failure(exc) and self._health_checks_enabled()
        logger.log(
            logging.DEBUG if quiet else logging.WARNING,
            "request to %s failed (attempt %d/%d): %s; retrying",
            self._describe(),
            retry_state.attempt_number,
            self.max_attempts,
            describe_failure(exc) if exc is not None else "unknown error",
        )

    # -- public API --------------------------------------------------------------------------------
    async def chat_completion(self, **kwargs) -> ChatCompletion:
        """OpenAI-style chat completion (reasoning kwargs injected unless ``skip_reasoning=True``)."""
        split, kwargs = self._prepare(kwargs, chat_completion=True)
        kwargs = self._inject_reasoning_kwargs(kwargs)
        return await self._call(self._chat_completion_wrapper, split, kwargs)

    async def completion(self, **kwargs) -> Completion:
        """OpenAI-style text completion (no reasoning injection)."""
        split, kwargs = self._prepare(kwargs, chat_completion=False)
        kwargs.pop("skip_reasoning", None)
        return await self._call(self._completion_wrapper, split, kwargs)

    async def tokens_and_logprobs_completion(self, **kwargs) -> tuple[list, list, list, list]:
        """Token-level completion from ``prompt`` (text) or ``input_ids``.

        Returns ``(prompt_tokens, output_tokens, output_logprobs, finish_reasons)`` with one list per
        generated choice in the last three.
        """
        split, kwargs = self._prepare(kwargs, chat_completion=False)
        kwargs.pop("skip_reasoning", None)
        return await self._call(self._tokens_and_logprobs_completion_wrapper, split, kwargs)

    async def get_logprobs(self, **kwargs) -> dict[str, Any]:
        """Prompt logprobs for ``prompt``/``input_ids`` with ``top_k`` (or ``top_logprobs``) per position.

        Returns ``{"prompt_tokens": [...], "prompt_topk_token_ids": [[...]], "prompt_topk_logprobs": [[...]]}``.
        """
        split, kwargs = self._prepare(kwargs, chat_completion=False)
        return await self._call(self._get_logprobs_wrapper, split, kwargs)

    def retire(self) -> None:
        """Take the server out of service: stop its health check, and make every request to it, waiting or
        already sent, fail now with :class:`ServerUnavailableError` (a server that moved away may never answer
        at its old address, or something else may hold it)."""
        self.retired = True
        for task in list(self._in_flight):
            self._cancelled_by_retire.add(task)
            task.cancel()
        self.initialized = True  # no new health check on a later request either
        task, self.check_task = self.check_task, None
        if task is not None and not task.done():
            task.cancel()
        self.unavailable_grace = 0.0
        self._listeners.notify()

    async def close(self) -> None:
        """Stop the health check and release network resources."""
        task, self.check_task = self.check_task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                if task.get_loop() is asyncio.get_running_loop():
                    await task
            except (asyncio.CancelledError, Exception):
                pass
        self.initialized = False
