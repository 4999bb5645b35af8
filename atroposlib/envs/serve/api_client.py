"""The environment's HTTP client for the trajectory API (``run-api``).

One :class:`TrajectoryApiClient` holds one ``aiohttp`` session for the life of a ``serve`` run. It sends the
``Authorization: Bearer`` header when ``ATROPOS_API_KEY`` (or an explicit key) is set, gzips scored-data bodies
of 1 KiB or more when that makes them smaller, and never drops a scored group silently:

* ``503`` (the API's queue is full) -> wait ``Retry-After`` (bounded) and resend the same body, for as long as
  it takes, logging how long it has been waiting;
* network errors and other ``5xx`` -> bounded retries with exponential backoff (tenacity);
* ``4xx`` -> logged with the API's reason and counted; then, like a final network failure, the payload is
  appended to a local spill file (:class:`~atroposlib.envs.serve.jsonl_sink.UnsentGroupsFile`) whose path is logged.
  ``python -m atroposlib.envs.serve.api_client resend FILE --url URL`` sends such a file again.
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import gzip
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import aiohttp
import orjson
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from atroposlib.envs.serve.jsonl_sink import UnsentGroupsFile, read_unsent_groups

logger = logging.getLogger(__name__)

GZIP_MIN_BYTES = 1024
API_KEY_ENV = "ATROPOS_API_KEY"


class ApiError(Exception):
    """Base class of trajectory-API client errors."""


class ApiUnavailable(ApiError):
    """The API could not be reached or answered with a server error (5xx)."""


class ApiRejected(ApiError):
    """The API refused the request (4xx); ``status`` and ``reason`` say why."""

    def __init__(self, status: int, reason: str, path: str):
        super().__init__(f"{path} answered {status}: {reason}")
        self.status = status
        self.reason = reason
        self.path = path


class _Backpressure(Exception):
    """Internal: the API answered 503; ``retry_after`` is its hint in seconds (or None)."""

    def __init__(self, retry_after: Optional[float]):
        super().__init__("queue full")
        self.retry_after = retry_after


@dataclass
class SendOutcome:
    """Result of :meth:`TrajectoryApiClient.send_scored_data`."""

    delivered: bool
    response: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    spilled_to: Optional[Path] = None
    waited_for_backpressure_s: float = 0.0


def encode_body(payload: Any) -> tuple[bytes, dict[str, str]]:
    """Serialise ``payload`` (numpy values allowed) to JSON; gzip it when >= 1 KiB and smaller that way."""
    body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    headers = {"Content-Type": "application/json"}
    if len(body) >= GZIP_MIN_BYTES:
        packed = gzip.compress(body, compresslevel=5)
        if len(packed) < len(body):
            headers["Content-Encoding"] = "gzip"
            return packed, headers
    return body, headers


def parse_retry_after(value: Optional[str], *, default: float = 1.0, cap: float = 30.0) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), within ``[0.05, cap]``."""
    seconds = default
    if value:
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
                seconds = when.timestamp() - time.time()
            except (TypeError, ValueError):
                seconds = default
    return min(cap, max(0.05, seconds))


def scored_data_path(payload: Any) -> str:
    """``/scored_data_list`` for a list of groups, ``/scored_data`` for one group."""
    return "/scored_data_list" if isinstance(payload, list) else "/scored_data"


class TrajectoryApiClient:
    """Asynchronous client for the endpoints an environment uses.

    ``base_url`` is the API root (``rollout_server_url``). ``unsent`` receives payloads that could not be
    delivered (may be a callable creating it lazily). All methods must run on one event loop.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: Optional[str] = None,
        request_timeout: float = 30.0,
        send_timeout: float = 120.0,
        send_attempts: int = 8,
        max_backoff: float = 30.0,
        unsent: UnsentGroupsFile | Callable[[], UnsentGroupsFile] | None = None,
        label: str = "env",
    ):
        self.base_url = base_url.rstrip("/")
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._auth = {"Authorization": f"Bearer {key}"} if key else {}
        self.request_timeout = request_timeout
        self.send_timeout = send_timeout
        self.send_attempts = max(1, send_attempts)
        self.max_backoff = max_backoff
        self._unsent = unsent
        self.label = label
        self._session: Optional[aiohttp.ClientSession] = None
        #: Counters: ``delivered``, ``backpressure_waits``, ``rejected``, ``failed``, ``spilled``.
        self.stats: Counter[str] = Counter()

    # -- session -------------------------------------------------------------------------------------------
    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._auth, timeout=aiohttp.ClientTimeout(total=self.request_timeout)
            )
        return self._session

    async def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    # -- single requests -----------------------------------------------------------------------------------
    async def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: Optional[bytes] = None,
        headers: Optional[dict[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """One request. Returns the decoded JSON (or text). Raises ApiUnavailable / ApiRejected / _Backpressure."""
        url = f"{self.base_url}{path}"
        if json_body is not None:
            data = orjson.dumps(json_body, option=orjson.OPT_SERIALIZE_NUMPY)
            headers = {"Content-Type": "application/json", **(headers or {})}
        kwargs: dict[str, Any] = {"data": data, "headers": headers}
        if timeout is not None:
            kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout)
        try:
            async with self._get_session().request(method, url, **kwargs) as resp:
                text = await resp.text()
                if resp.status == 503:
                    raise _Backpressure(
                        parse_retry_after(resp.headers.get("Retry-After"), cap=self.max_backoff)
                        if resp.headers.get("Retry-After")
                        else None
                    )
                if resp.status >= 500:
                    raise ApiUnavailable(f"{method} {path} answered {resp.status}: {text[:300]}")
                if resp.status >= 400:
                    raise ApiRejected(resp.status, _reason(text), path)
                try:
                    return orjson.loads(text) if text else None
                except orjson.JSONDecodeError:
                    return text
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ApiUnavailable(f"{method} {url} failed: {type(exc).__name__}: {exc}") from exc

    async def call(self, method: str, path: str, json_body: Any = None, *, attempts: int = 3) -> Any:
        """A request retried ``attempts`` times on ApiUnavailable (and 503) with random exponential backoff."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type((ApiUnavailable, _Backpressure)),
            stop=stop_after_attempt(max(1, attempts)),
            wait=wait_random_exponential(multiplier=0.5, max=min(10.0, self.max_backoff)),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._request(method, path, json_body=json_body)
        except _Backpressure as exc:
            raise ApiUnavailable(f"{method} {path}: API busy (503)") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # -- endpoints -----------------------------------------------------------------------------------------
    async def wandb_info(self) -> dict[str, Any]:
        return await self.call("GET", "/wandb_info")

    async def info(self) -> dict[str, Any]:
        return await self.call("GET", "/info")

    async def register_env(self, registration: dict[str, Any]) -> dict[str, Any]:
        return await self.call("POST", "/register-env", registration, attempts=1)

    async def status_env(self, env_id: int) -> dict[str, Any]:
        # The API declares the env id as a JSON body even on this GET (wire compatibility).
        return await self.call("GET", "/status-env", {"env_id": env_id}, attempts=2)

    async def disconnect_env(self, env_id: int) -> dict[str, Any]:
        return await self.call("POST", "/disconnect-env", {"env_id": env_id}, attempts=2)

    # -- scored data ---------------------------------------------------------------------------------------
    def _spill(self, payload: Any, path: str, reason: str) -> Optional[Path]:
        sink = self._unsent() if callable(self._unsent) else self._unsent
        if sink is None:
            return None
        try:
            written = sink.append(payload, endpoint=path, reason=reason)
        except OSError as exc:
            logger.error("[%s] could not write undelivered groups to a spill file: %s", self.label, exc)
            return None
        self.stats["spilled"] += 1
        return written

    async def _post_until_accepted(
        self, path: str, body: bytes, headers: dict[str, str], waited: list[float]
    ) -> Any:
        """POST ``body``; on 503 wait and resend the same body until it is accepted (never gives up)."""
        started: Optional[float] = None
        next_report = 0.0
        delay = 0.5
        while True:
            try:
                result = await self._request(
                    "POST", path, data=body, headers=headers, timeout=self.send_timeout
                )
            except _Backpressure as exc:
                now = time.monotonic()
                if started is None:
                    started = now
                    self.stats["backpressure_waits"] += 1
                    logger.info("[%s] API queue is full (503); holding the group and retrying", self.label)
                    next_report = now + 30.0
                elif now >= next_report:
                    logger.info(
                        "[%s] still waiting for room in the API queue (%.0f s so far)",
                        self.label,
                        now - started,
                    )
                    next_report = now + 30.0
                wait = exc.retry_after if exc.retry_after is not None else delay
                delay = min(self.max_backoff, delay * 2)
                await asyncio.sleep(min(wait, self.max_backoff))
                continue
            if started is not None:
                waited[0] = time.monotonic() - started
                logger.info("[%s] API accepted the group after %.1f s of backpressure", self.label, waited[0])
            return result

    async def send_scored_data(self, payload: Any) -> SendOutcome:
        """Deliver one group (dict) or several (list) to ``/scored_data`` / ``/scored_data_list``.

        Never raises for delivery problems: the outcome says whether it was delivered and, if not, where the
        payload was saved. Cancellation (shutdown) also saves the payload before re-raising.
        """
        path = scored_data_path(payload)
        body, headers = encode_body(payload)
        waited = [0.0]
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(ApiUnavailable),
            stop=stop_after_attempt(self.send_attempts),
            wait=wait_random_exponential(multiplier=0.5, max=self.max_backoff),
            before_sleep=lambda rs: logger.warning(
                "[%s] sending to %s failed (attempt %d/%d): %s; retrying",
                self.label,
                path,
                rs.attempt_number,
                self.send_attempts,
                rs.outcome.exception() if rs.outcome else "?",
            ),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    response = await self._post_until_accepted(path, body, headers, waited)
            self.stats["delivered"] += 1
            return SendOutcome(True, response if isinstance(response, dict) else None, None, None, waited[0])
        except asyncio.CancelledError:
            spilled = self._spill(payload, path, "cancelled during shutdown")
            logger.warning("[%s] shutdown interrupted a send; group saved to %s", self.label, spilled)
            raise
        except ApiRejected as exc:
            self.stats["rejected"] += 1
            spilled = self._spill(payload, path, str(exc))
            logger.error(
                "[%s] the API rejected a group (HTTP %d): %s; saved it to %s",
                self.label,
                exc.status,
                exc.reason,
                spilled,
            )
            return SendOutcome(False, None, str(exc), spilled, waited[0])
        except ApiUnavailable as exc:
            self.stats["failed"] += 1
            spilled = self._spill(payload, path, str(exc))
            logger.error(
                "[%s] could not deliver a group after %d attempts (%s); saved it to %s",
                self.label,
                self.send_attempts,
                exc,
                spilled,
            )
            return SendOutcome(False, None, str(exc), spilled, waited[0])


def _reason(text: str) -> str:
    """A one-line reason from an error body (FastAPI ``detail`` when present)."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return " ".join(text.split())[:500] or "(empty body)"
    if isinstance(data, dict) and "detail" in data:
        detail = data["detail"]
        if isinstance(detail, list):
            parts = []
            for err in detail[:3]:
                if isinstance(err, dict):
                    loc = ".".join(str(x) for x in err.get("loc", []))
                    parts.append(f"{loc}: {err.get('msg', err)}")
                else:
                    parts.append(str(err))
            return "; ".join(parts)
        return str(detail)[:500]
    return str(data)[:500]


async def resend_unsent(path: str | Path, url: str, *, api_key: Optional[str] = None) -> tuple[int, int]:
    """Send every payload of a spill file again. Returns ``(delivered, failed)``; failures are re-spilled
    to ``<path>.retry.jsonl``."""
    source = Path(path)
    retry_file = UnsentGroupsFile(source.with_suffix(".retry.jsonl"))
    client = TrajectoryApiClient(url, api_key=api_key, unsent=retry_file, label="resend")
    delivered = failed = 0
    try:
        for record in read_unsent_groups(source):
            outcome = await client.send_scored_data(record["payload"])
            if outcome.delivered:
                delivered += 1
            else:
                failed += 1
    finally:
        await client.close()
        retry_file.close()
    return delivered, failed


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m atroposlib.envs.serve.api_client resend FILE --url URL``: deliver saved groups again."""
    parser = argparse.ArgumentParser(prog="python -m atroposlib.envs.serve.api_client")
    sub = parser.add_subparsers(dest="command", required=True)
    resend = sub.add_parser("resend", help="send the groups saved in a spill file to the API again")
    resend.add_argument("file")
    resend.add_argument("--url", default="http://localhost:8000", help="trajectory API base URL")
    args = parser.parse_args(argv)
    if not Path(args.file).is_file():
        print(f"error: no such file: {args.file}", file=sys.stderr)
        return 2
    delivered, failed = asyncio.run(resend_unsent(args.file, args.url))
    print(f"delivered {delivered} payload(s), {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
