"""Request body limits, gzip request inflation and content-type checks (ASGI middleware).

Every request body is read here, before any route sees it:

- a body larger than ``max_body_bytes`` gets 413, judged from ``Content-Length`` before reading
  and counted while reading (chunked bodies included), so an oversized body is never buffered;
- a body whose ``Content-Encoding`` contains ``gzip`` is inflated (all gzip members); inflating
  stops at ``max_inflated_bytes`` (413, "gzip bomb"); corrupt or truncated data gets 400
  text/plain ``Invalid gzip payload`` (compat: atroposlib 0.4.0's answer to a non-gzip body);
- on the routes that take JSON, a ``Content-Type`` that is not JSON gets 415 (a missing one is
  accepted, as FastAPI does).

The route then receives the (inflated) body as a single message with ``Content-Length``
rewritten and ``Content-Encoding`` removed.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from atroposlib.api.responses import dumps, send_raw

try:  # Intel ISA-L inflates gzip faster than zlib, with the same API.
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    _zlib = zlib

INVALID_GZIP = b"Invalid gzip payload"
GZIP_MAGIC = b"\x1f\x8b"


class BodyTooLarge(Exception):
    """The body (or its inflated form) exceeds the configured limit."""


class InvalidGzip(Exception):
    """The body is not a complete, valid gzip stream."""


def is_json_content_type(value: str) -> bool:
    """``application/json`` or ``application/<anything>+json`` (parameters ignored)."""
    media = value.split(";", 1)[0].strip().lower()
    maintype, _, subtype = media.partition("/")
    return maintype == "application" and (subtype == "json" or subtype.endswith("+json"))


def inflate_gzip(data: bytes, limit: int) -> bytes:
    """Inflate every gzip member of ``data``; at most ``limit`` bytes of output.

    Raises :class:`BodyTooLarge` past the limit and :class:`InvalidGzip` for data that is not
    gzip, is corrupt, or ends early. Zero padding after the last member is ignored.
    """
    out: list[bytes] = []
    total = 0
    remaining = data
    while remaining:
        inflater = _zlib.decompressobj(16 + zlib.MAX_WBITS)
        room = limit - total
        try:
            chunk = inflater.decompress(remaining, room + 1)
        except (zlib.error, _zlib.error) as exc:
            raise InvalidGzip(str(exc)) from None
        if len(chunk) > room:
            raise BodyTooLarge(f"gzip body inflates to more than {limit} bytes")
        if not inflater.eof:
            raise InvalidGzip("truncated gzip stream")
        total += len(chunk)
        out.append(chunk)
        remaining = inflater.unused_data
        if remaining and not remaining.startswith(GZIP_MAGIC):
            if remaining.strip(b"\x00"):
                raise InvalidGzip("trailing garbage after gzip data")
            break
    return b"".join(out)


@dataclass(frozen=True)
class Rejection:
    """A complete error response decided while reading a request body."""

    status: int
    body: bytes
    content_type: bytes = b"application/json"
    reason: str = ""
    close: bool = False

    async def send(self, send: Send) -> None:
        await send_raw(send, self.status, self.body, self.content_type, close=self.close)


def _too_large(limit: int, flag: str) -> Rejection:
    # The rest of the body is left unread, so the connection cannot be reused.
    body = b'{"detail":"request body is larger than %d bytes (%s)"}' % (limit, flag.encode())
    return Rejection(413, body, reason="body_too_large", close=True)


@dataclass(frozen=True)
class BodyLimits:
    """Size limits of request bodies (bytes on the wire, bytes after gzip inflation)."""

    max_body_bytes: int
    max_inflated_bytes: int


async def receive_body(
    scope: Scope, receive: Receive, limits: BodyLimits, *, json_route: bool
) -> tuple[bytes, bool] | Rejection | None:
    """Read a request body within ``limits``, without inflating it.

    Returns ``(body, gzipped)``, a :class:`Rejection` to send instead of handling the request,
    or ``None`` when the client disconnected. ``json_route`` enables the 415 check of
    ``Content-Type``. ``gzipped`` is true when the body must go through :func:`inflate_body`.
    """
    content_length = content_type = None
    encoding = ""
    for name, value in scope["headers"]:
        if name == b"content-length":
            content_length = value
        elif name == b"content-encoding":
            encoding = value.decode("latin-1").lower()
        elif name == b"content-type":
            content_type = value.decode("latin-1")

    if content_type is not None and json_route and not is_json_content_type(content_type):
        detail = f"unsupported Content-Type {content_type!r}: send application/json"
        return Rejection(415, dumps({"detail": detail}), reason="unsupported_media_type")
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            declared = -1
        if declared > limits.max_body_bytes:
            return _too_large(limits.max_body_bytes, "max_body_bytes")

    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        if chunk:
            chunks.append(chunk)
            size += len(chunk)
            if size > limits.max_body_bytes:
                return _too_large(limits.max_body_bytes, "max_body_bytes")
        if not message.get("more_body", False):
            break
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return data, bool(data) and "gzip" in encoding


def inflate_body(data: bytes, max_inflated_bytes: int) -> bytes | Rejection:
    """The inflated gzip ``data``, or the 400/413 :class:`Rejection` for a bad or too big one."""
    try:
        return inflate_gzip(data, max_inflated_bytes)
    except InvalidGzip:
        return Rejection(400, INVALID_GZIP, b"text/plain; charset=utf-8", reason="invalid_gzip")
    except BodyTooLarge:
        return _too_large(max_inflated_bytes, "max_inflated_bytes")


async def read_body(
    scope: Scope, receive: Receive, limits: BodyLimits, *, json_route: bool
) -> bytes | Rejection | None:
    """:func:`receive_body`, then :func:`inflate_body` for a gzip body: the body as JSON text."""
    received = await receive_body(scope, receive, limits, json_route=json_route)
    if received is None or isinstance(received, Rejection):
        return received
    data, gzipped = received
    return inflate_body(data, limits.max_inflated_bytes) if gzipped else data


class RequestBodyMiddleware:
    """Enforces body size limits, inflates gzip bodies and checks JSON content types."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_inflated_bytes: int,
        json_paths: Iterable[str] = (),
        on_reject: Callable[[str], None] | None = None,
    ):
        self.app = app
        self.limits = BodyLimits(max_body_bytes, max_inflated_bytes)
        self.json_paths = frozenset(json_paths)
        self.on_reject = on_reject or (lambda reason: None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        result = await read_body(scope, receive, self.limits, json_route=scope["path"] in self.json_paths)
        if result is None:
            return
        if isinstance(result, Rejection):
            self.on_reject(result.reason)
            await result.send(send)
            return
        data = result
        if any(name == b"content-encoding" and b"gzip" in value.lower() for name, value in scope["headers"]):
            headers = [
                (n, v) for n, v in scope["headers"] if n not in (b"content-encoding", b"content-length")
            ]
            headers.append((b"content-length", str(len(data)).encode()))
            scope = dict(scope, headers=headers)

        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
