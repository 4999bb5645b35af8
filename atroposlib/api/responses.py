"""Small response helpers shared by routes and ASGI middleware."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response
from starlette.types import Send

JSON = "application/json"


#: Encodes every JSON the API writes. ``msgspec.Raw`` values are inserted as they are (stored groups);
#: integers of any size are written exactly (registration ids are 128-bit); other objects as ``str()``.
ENCODER = msgspec.json.Encoder(enc_hook=str)


def dumps(content: Any) -> bytes:
    """Compact JSON (UTF-8, no ASCII escaping; NaN and infinities as ``null``)."""
    return ENCODER.encode(content)


def json_response(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A compact JSON response (no ASCII escaping, like Starlette's)."""
    return Response(dumps(content), status_code=status_code, media_type=JSON, headers=headers)


def raw_json_response(body: bytes, status_code: int = 200) -> Response:
    """A response whose body is already JSON."""
    return Response(body, status_code=status_code, media_type=JSON)


async def send_json(
    send: Send,
    status: int,
    content: Any,
    *,
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Send a complete JSON response from ASGI middleware."""
    await send_raw(send, status, dumps(content), JSON.encode(), extra_headers=extra_headers)


async def send_raw(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    *,
    extra_headers: list[tuple[bytes, bytes]] | None = None,
    close: bool = False,
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    headers.extend(extra_headers or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
