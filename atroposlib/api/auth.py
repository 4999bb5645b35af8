"""Shared-secret bearer authentication for every route (ASGI middleware)."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from atroposlib.api.responses import send_json

UNAUTHORIZED_DETAIL = "missing or invalid API key: send the header 'Authorization: Bearer <key>'"


def bearer_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header, or ``None``."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                return token.strip()
            return None
    return None


class ApiKeyMiddleware:
    """Answers 401 unless the request carries ``Authorization: Bearer <api_key>``.

    CORS preflight requests (``OPTIONS`` with ``Access-Control-Request-Method``) pass without a
    key, since browsers never attach credentials to them.
    """

    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self._key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        if scope["method"] == "OPTIONS" and any(n == b"access-control-request-method" for n, _ in headers):
            await self.app(scope, receive, send)
            return
        token = bearer_token(headers)
        if token is None or not hmac.compare_digest(token, self._key):
            await send_json(
                send, 401, {"detail": UNAUTHORIZED_DETAIL}, extra_headers=[(b"www-authenticate", b"Bearer")]
            )
            return
        await self.app(scope, receive, send)
