"""The hot endpoints (``POST /scored_data``, ``POST /scored_data_list``, ``GET /batch``).

Their logic lives here as functions returning a complete :class:`Outcome`, used by two callers:

- the FastAPI routes in :mod:`atroposlib.api.server` (documentation, CORS requests);
- :class:`FastPathMiddleware`, which answers the same requests directly at the ASGI level when
  no CORS handling is involved, skipping the framework's per-request machinery. It applies the
  same authentication, body limits, gzip handling and response compression as the full stack,
  so both paths give byte-identical answers.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

try:  # Intel ISA-L: gzip level 1 several times faster than zlib's
    from isal.isal_zlib import compress as _compress
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    from zlib import compress as _compress

from atroposlib.api.auth import UNAUTHORIZED_DETAIL, bearer_token
from atroposlib.api.decode_pool import Decoded, DecodePool, decode_body
from atroposlib.api.limits import BodyLimits, Rejection, receive_body
from atroposlib.api.logs import event
from atroposlib.api.metrics import ApiMetrics
from atroposlib.api.responses import dumps
from atroposlib.api.state import NOT_REGISTERED_MESSAGE, NotRegistered, QueueFull, TrajectoryState
from atroposlib.api.store import STORAGE_ERRORS
from atroposlib.api.validation import InvalidRequest, check_groups

logger = logging.getLogger("atroposlib.api")

JSON_TYPE = b"application/json"
#: Responses at least this large are gzip-compressed when the client accepts it (as Starlette's
#: GZipMiddleware with ``minimum_size=1000``).
GZIP_MIN_SIZE = 1000
#: Larger responses are compressed in a worker thread (zlib releases the GIL).
GZIP_THREAD_MIN_SIZE = 128 * 1024
_NULL_BATCH = b'{"batch":null}'


@dataclass(frozen=True)
class Outcome:
    """A complete response: status, JSON (or other) body, extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    content_type: bytes = JSON_TYPE


def _json(status: int, content: Any, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Outcome:
    return Outcome(status, dumps(content), headers)


def error_outcome(exc: Exception, metrics: ApiMetrics, retry_after: int) -> Outcome:
    """The response for an exception of the ingest/batch logic (also used by the routes)."""
    if isinstance(exc, InvalidRequest):
        metrics.rejected.labels(reason=exc.errors[0]["type"] if exc.errors else "invalid").inc()
        return _json(422, {"detail": exc.errors})
    if isinstance(exc, QueueFull):
        metrics.rejected.labels(reason="queue_full").inc()
        return _json(503, {"detail": f"queue full: {exc}"}, ((b"retry-after", str(retry_after).encode()),))
    if isinstance(exc, STORAGE_ERRORS):
        metrics.rejected.labels(reason="storage_error").inc()
        logger.error("storage error: %s", exc)
        return _json(
            503,
            {"detail": f"storage error, nothing was changed: {exc}"},
            ((b"retry-after", str(retry_after).encode()),),
        )
    raise exc


def ingest_one(state: TrajectoryState, metrics: ApiMetrics, body: bytes, retry_after: int) -> Outcome:
    """``POST /scored_data`` of an inflated body."""
    started = time.perf_counter()
    return admit(state, metrics, decode_body("one", body, False, 0), retry_after, started)


def ingest_many(state: TrajectoryState, metrics: ApiMetrics, body: bytes, retry_after: int) -> Outcome:
    """``POST /scored_data_list`` of an inflated body: all or nothing."""
    started = time.perf_counter()
    return admit(state, metrics, decode_body("many", body, False, 0), retry_after, started, in_list=True)


def admit(
    state: TrajectoryState,
    metrics: ApiMetrics,
    decoded: Decoded,
    retry_after: int,
    started: float,
    *,
    in_list: bool = False,
) -> Outcome:
    """Check decoded groups against the current registration and queue them (or say why not).

    ``decoded`` comes from an inflated body or has had its body-level rejection answered already.
    """
    try:
        if decoded.invalid is not None:
            raise decoded.invalid
        groups = decoded.groups
        check_groups(groups, state.admission_rules(), in_list=in_list)
        results = state.ingest(groups) if groups else []
    except (InvalidRequest, QueueFull, *STORAGE_ERRORS) as exc:
        return error_outcome(exc, metrics, retry_after)
    metrics.ingest_latency.observe(time.perf_counter() - started)
    metrics.count_decoded(groups)
    if not in_list:
        return _json(200, results[0])
    response: dict[str, Any] = {"status": "received", "groups_processed": len(groups)}
    buffered = [r for r in results if r["status"] == "buffered"]
    if buffered:
        response["buffered"] = len(buffered)
        response["last_buffer_size"] = buffered[-1]["buffer_size"]
    return _json(200, response)


def serve_batch(state: TrajectoryState, metrics: ApiMetrics, retry_after: int) -> Outcome:
    """``GET /batch``: a batch, ``{"batch": null}``, or the not-registered error body (200)."""
    started = time.perf_counter()
    try:
        served = state.next_batch()
    except NotRegistered:
        return _json(200, {"status": "error", "message": NOT_REGISTERED_MESSAGE, "batch": []})
    except STORAGE_ERRORS as exc:
        return error_outcome(exc, metrics, retry_after)
    if served is None:
        return Outcome(200, _NULL_BATCH)
    metrics.batch_latency.observe(time.perf_counter() - started)
    event(
        logger,
        logging.INFO,
        f"Sending batch of {served.sequences} sequences",
        batch_id=served.batch_id,
        groups=served.groups,
        step=state.meta.step,
    )
    return Outcome(200, served.body)


def gzip_bytes(data: bytes) -> bytes:
    """A gzip stream of ``data`` (fast level 1)."""
    return _compress(data, 1, 31)


async def send_outcome(send: Send, outcome: Outcome, accepts_gzip: bool) -> None:
    """Send ``outcome`` with the headers Starlette's GZipMiddleware would give it.

    Bodies of at least 1000 bytes get ``Vary: Accept-Encoding``, and are gzip-compressed when
    the client accepts it.
    """
    body = outcome.body
    headers = [(b"content-type", outcome.content_type)]
    if len(body) >= GZIP_MIN_SIZE:
        if accepts_gzip:
            if len(body) >= GZIP_THREAD_MIN_SIZE:
                body = await asyncio.to_thread(gzip_bytes, body)
            else:
                body = gzip_bytes(body)
            headers.append((b"content-encoding", b"gzip"))
        headers.append((b"vary", b"Accept-Encoding"))
    headers.append((b"content-length", str(len(body)).encode()))
    headers.extend(outcome.headers)
    await send({"type": "http.response.start", "status": outcome.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_HOT = {
    ("POST", "/scored_data"): "one",
    ("POST", "/scored_data_list"): "many",
    ("GET", "/batch"): "batch",
}


class FastPathMiddleware:
    """Answers the hot endpoints directly; everything else (and CORS requests) goes to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        get_state: Callable[[], TrajectoryState | None],
        metrics: ApiMetrics,
        limits: BodyLimits,
        api_key: str | None,
        retry_after: int,
        pool: DecodePool,
    ):
        self.app = app
        self.pool = pool
        self.get_state = get_state
        self.metrics = metrics
        self.limits = limits
        self.key = api_key.encode() if api_key else None
        self.retry_after = retry_after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = _HOT.get((scope.get("method"), scope.get("path"))) if scope["type"] == "http" else None
        state = self.get_state() if kind else None
        if state is None:
            await self.app(scope, receive, send)
            return
        accepts_gzip = False
        for name, value in scope["headers"]:
            if name == b"origin":
                await self.app(scope, receive, send)  # CORS: let the full stack answer
                return
            if name == b"accept-encoding":
                accepts_gzip = b"gzip" in value
        if self.key is not None:
            token = bearer_token(scope["headers"])
            if token is None or not hmac.compare_digest(token, self.key):
                detail = _json(401, {"detail": UNAUTHORIZED_DETAIL}, ((b"www-authenticate", b"Bearer"),))
                await send_outcome(send, detail, False)
                return
        if kind == "batch":
            outcome = serve_batch(state, self.metrics, self.retry_after)
        else:
            received = await receive_body(scope, receive, self.limits, json_route=True)
            if received is None:
                return
            if isinstance(received, Rejection):
                self.metrics.rejected.labels(reason=received.reason).inc()
                await received.send(send)
                return
            started = time.perf_counter()
            data, gzipped = received
            decoded = await self.pool.decode(kind, data, gzipped)
            if decoded.rejection is not None:
                self.metrics.rejected.labels(reason=decoded.rejection.reason).inc()
                await decoded.rejection.send(send)
                return
            outcome = admit(state, self.metrics, decoded, self.retry_after, started, in_list=kind == "many")
        await send_outcome(send, outcome, accepts_gzip)
