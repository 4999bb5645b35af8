"""Talking to the Atropos trajectory API (``run-api``).

The protocol: poll ``/info``, ``POST /register``, loop on ``GET /batch``; with

* a bearer token from ``--api-key`` / ``$ATROPOS_API_KEY`` on every request;
* bounded retries (tenacity, exponential backoff) with a clear :class:`AtroposApiError` at the end;
* ``POST /batch/ack`` once a batch's update is safely in a checkpoint, and ``POST /batch/replay`` when
  resuming, so batches served to a trainer that crashed are trained again instead of lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import requests
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from example_trainer.grpo.config import TrainingConfig

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0


class AtroposApiError(RuntimeError):
    """The API could not be reached, rejected the request, or answered something unusable."""


class _Retryable(Exception):
    """A transient failure (connection error, timeout, 5xx) worth another attempt."""


def stop_when(condition: Callable[[], bool]) -> Callable[[Any], bool]:
    """A tenacity stop condition that ends the retries as soon as ``condition()`` holds."""
    return lambda retry_state: condition()


def auth_headers(api_key: str | None = None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` from ``api_key`` or ``$ATROPOS_API_KEY`` ({} when neither is set)."""
    key = api_key or os.environ.get("ATROPOS_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


class AtroposClient:
    """A small synchronous client for the endpoints the trainer uses.

    Every call makes up to ``retries`` attempts on connection errors, timeouts and 5xx answers
    (exponential backoff between ``min_wait`` and ``max_wait`` seconds) and then raises
    :class:`AtroposApiError` naming the URL and the last error. 4xx answers are not retried.
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        retries: int = 5,
        min_wait: float = 2.0,
        max_wait: float = 30.0,
        timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = auth_headers(api_key)
        self.retries = retries
        self.min_wait = min_wait
        self.max_wait = max_wait
        self.timeout = timeout
        self.session = requests.Session()
        #: Once this returns True (the trainer is shutting down) failed requests are not retried.
        self.should_stop: Callable[[], bool] | None = None

    @classmethod
    def from_config(cls, config: TrainingConfig) -> AtroposClient:
        return cls(config.atropos_url, api_key=config.api_key, retries=config.api_retries)

    # --- plumbing ----------------------------------------------------------------------------------
    def _once(self, method: str, path: str, json: Any = None) -> Any:
        try:
            resp = self.session.request(
                method, self.url + path, json=json, headers=self.headers, timeout=self.timeout
            )
        except requests.RequestException as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code == 401:
            raise AtroposApiError(
                f"{method} {self.url}{path}: 401 unauthorized (set ATROPOS_API_KEY or --api-key to the API's key)"
            )
        if resp.status_code >= 500:  # includes 503 backpressure / restarting server
            raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:200]}")
        if resp.status_code >= 400:
            raise AtroposApiError(f"{method} {self.url}{path}: HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            return resp.json()
        except ValueError:
            return resp.text

    def request(self, method: str, path: str, json: Any = None) -> Any:
        """One API call with bounded retries; returns the decoded JSON body (or text)."""
        retrying = Retrying(
            stop=stop_after_attempt(self.retries)
            | stop_when(lambda: bool(self.should_stop and self.should_stop())),
            wait=wait_exponential(multiplier=1, min=self.min_wait, max=self.max_wait),
            retry=retry_if_exception(lambda e: isinstance(e, _Retryable)),
            before_sleep=lambda rs: logger.warning(
                "%s %s%s failed (%s); retry %d/%d",
                method,
                self.url,
                path,
                rs.outcome.exception(),
                rs.attempt_number,
                self.retries - 1,
            ),  # fmt: skip
            reraise=False,
        )
        try:
            return retrying(self._once, method, path, json)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise AtroposApiError(
                f"Atropos API at {self.url} unreachable: {method} {path} failed {self.retries} times ({last})"
            ) from None

    # --- endpoints ---------------------------------------------------------------------------------
    def wait_until_ready(self, timeout: float = 30.0, poll: float = 1.0) -> None:
        """Poll ``GET /info`` until it answers 200; :class:`AtroposApiError` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            try:
                resp = self.session.get(self.url + "/info", headers=self.headers, timeout=2)
                if resp.status_code == 200:
                    return
                if resp.status_code == 401:
                    raise AtroposApiError(
                        f"Atropos API at {self.url}: 401 unauthorized (set ATROPOS_API_KEY or --api-key)"
                    )
                last = f"HTTP {resp.status_code}"
            except requests.RequestException as exc:
                last = type(exc).__name__
            if time.monotonic() >= deadline:
                raise AtroposApiError(
                    f"Atropos API not reachable at {self.url} after {timeout:.0f} s ({last}); start it with `run-api`"
                )
            time.sleep(poll)

    def register(self, config: TrainingConfig, starting_step: int = 0) -> dict[str, Any]:
        """``POST /register`` with the trainer's batch geometry; returns the reply (with ``uuid``)."""
        payload = registration_payload(config, starting_step)
        reply = self.request("POST", "/register", payload)
        if not isinstance(reply, dict) or "uuid" not in reply:
            raise AtroposApiError(f"unexpected /register reply from {self.url}: {reply!r}")
        return reply

    def info(self) -> dict[str, Any]:
        return self.request("GET", "/info")

    def status(self) -> dict[str, Any]:
        """``GET /status``: ``{"current_step": int, "queue_size": int}``."""
        return self.request("GET", "/status")

    def get_batch(self) -> tuple[int | None, list[dict[str, Any]] | None]:
        """``GET /batch`` → ``(batch_id, groups)``; ``(None, None)`` when no batch is ready yet.

        ``batch_id`` is None for servers that do not number batches (atroposlib 0.4.0).
        """
        reply = self.request("GET", "/batch")
        if not isinstance(reply, dict):
            raise AtroposApiError(f"unexpected /batch reply: {str(reply)[:200]}")
        if reply.get("status") == "error":
            raise AtroposApiError(f"/batch: {reply.get('message', reply)}")
        batch = reply.get("batch")
        if not batch:
            return None, None
        return reply.get("batch_id"), batch

    def ack(self, batch_id: int) -> bool:
        """``POST /batch/ack``; False (with a log line) when the server does not know acks or the id."""
        try:
            self.request("POST", "/batch/ack", {"batch_id": batch_id})
            return True
        except AtroposApiError as exc:
            logger.warning("could not acknowledge batch %s: %s", batch_id, exc)
            return False

    def replay(self) -> int:
        """``POST /batch/replay``: re-serve every unacknowledged batch first; returns how many (0 if the
        server has no replay support)."""
        try:
            reply = self.request("POST", "/batch/replay")
        except AtroposApiError as exc:
            if "HTTP 404" in str(exc) or "HTTP 405" in str(exc):
                logger.warning(
                    "the API does not support /batch/replay; unacknowledged batches are not replayed"
                )
                return 0
            raise
        return int(reply.get("batches", 0)) if isinstance(reply, dict) else 0

    def wait_for_batch(
        self,
        poll_interval: float = 1.0,
        should_stop: Callable[[], bool] | None = None,
        on_wait: Callable[[float], None] | None = None,
    ) -> tuple[int | None, list[dict[str, Any]] | None]:
        """Poll ``GET /batch`` until a batch arrives (sleeping ``poll_interval`` between empty answers).

        Returns ``(None, None)`` if ``should_stop()`` becomes true first. ``on_wait(seconds_waited)`` is
        called after each empty answer (progress reporting).
        """
        start = time.monotonic()
        while True:
            try:
                batch_id, groups = self.get_batch()
            except AtroposApiError:
                if should_stop and should_stop():  # the API went away while stopping: nothing to wait for
                    return None, None
                raise
            if groups:
                return batch_id, groups
            if should_stop and should_stop():
                return None, None
            if on_wait:
                on_wait(time.monotonic() - start)
            time.sleep(poll_interval)


def registration_payload(config: TrainingConfig, starting_step: int = 0) -> dict[str, Any]:
    """The ``/register`` body: ``batch_size`` = the trainer batch (``micro_batch_size`` × accumulation steps),
    the other registration fields, and
    ``max_staleness`` when set (the API serves it to environments in ``/info``)."""
    return {
        "wandb_group": config.wandb_group or "",
        "wandb_project": config.wandb_project or "",
        "batch_size": config.trainer_batch_size,
        "max_token_len": config.seq_len,
        "checkpoint_dir": config.save_path,
        "save_checkpoint_interval": (
            config.training_steps if config.checkpoint_interval <= 0 else config.checkpoint_interval
        ),
        "starting_step": starting_step,
        "num_steps": config.training_steps,
        **({"max_staleness": config.max_staleness} if config.max_staleness is not None else {}),
    }


# --- compat: module-level functions -----------------------------------------------------------------


def check_atropos_api(
    url: str = "http://localhost:8000", timeout: float = 30, api_key: str | None = None
) -> bool:
    """Poll ``GET /info`` until 200; True when reachable, False after ``timeout`` seconds."""
    try:
        AtroposClient(url, api_key=api_key).wait_until_ready(timeout)
        return True
    except AtroposApiError as exc:
        logger.error("%s", exc)
        return False


def register_trainer(config: TrainingConfig, starting_step: int = 0) -> dict[str, Any]:
    """``POST /register`` (5 attempts, exponential backoff 2-30 s); returns the reply with ``uuid``."""
    return AtroposClient.from_config(config).register(config, starting_step)


def get_batch(url: str = "http://localhost:8000", api_key: str | None = None) -> dict[str, Any]:
    """``GET /batch`` with retries; returns the raw reply (``{"batch": [...] | None, ...}``)."""
    reply = AtroposClient(url, api_key=api_key).request("GET", "/batch")
    if isinstance(reply, dict) and reply.get("status") == "error":
        raise AtroposApiError(f"/batch: {reply.get('message', reply)}")
    return reply
