"""Small HTTP helpers shared by the inference-server clients.

One :class:`HTTPClient` per backend keeps a single ``aiohttp.ClientSession`` (connection reuse)
per event loop, sends JSON with orjson, adds the bearer token, and turns HTTP error answers into
:class:`~atroposlib.envs.server_handling.errors.BackendHTTPError` with the backend's message.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from atroposlib.envs.server_handling.errors import BackendHTTPError, BackendProtocolError


def root_url(base_url: str | None) -> str:
    """The server root for an OpenAI-style base URL: ``http://h:p/v1`` -> ``http://h:p``.

    Only a trailing ``/v1`` path segment is removed; hosts and other path parts that contain
    ``v1`` are kept.
    """
    url = (base_url or "").rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` when a key is set, else no headers."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class HTTPClient:
    """A lazily created, loop-aware ``aiohttp`` session with JSON helpers.

    Args:
        api_key: bearer token sent with every request (omitted when empty).
        timeout: total timeout of one request, seconds.
    """

    def __init__(self, api_key: str | None = None, timeout: float = 1200.0):
        self.api_key = api_key
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def session(self) -> aiohttp.ClientSession:
        """The session for the running loop (a new one if the loop changed or it was closed)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # A session from a finished loop cannot be closed from this one; dropping it is all we can do.
            self._session = aiohttp.ClientSession(
                json_serialize=lambda obj: orjson.dumps(obj).decode(),
                headers=auth_headers(self.api_key),
            )
            self._loop = loop
        return self._session

    async def close(self) -> None:
        """Close the session if it belongs to the running loop."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                if self._loop is asyncio.get_running_loop():
                    await session.close()
            except RuntimeError:
                pass

    async def post_json(
        self,
        url: str,
        payload: dict[str, Any],
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        """POST ``payload`` as JSON and return the decoded JSON answer.

        Pydantic objects inside ``payload`` (e.g. a previous answer's message) are serialised with
        ``model_dump``. ``headers`` are added to (and override) the session's.

        Raises:
            BackendHTTPError: the server answered with status >= 400.
            BackendProtocolError: the answer was not valid JSON.
            aiohttp.ClientError / asyncio.TimeoutError: transport failures.
        """
        data = orjson.dumps(payload, default=_json_default)
        async with self.session().post(
            url,
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
            params=params,
            timeout=aiohttp.ClientTimeout(total=timeout or self.timeout),
        ) as response:
            body = await response.read()
            return _decode(url, response.status, body)

    async def get_json(self, url: str, timeout: float | None = None) -> Any:
        """GET ``url`` and return the decoded JSON answer (``None`` for an empty body)."""
        async with self.session().get(
            url, timeout=aiohttp.ClientTimeout(total=timeout or self.timeout)
        ) as response:
            body = await response.read()
            return _decode(url, response.status, body)

    async def get_status(self, url: str, timeout: float) -> int:
        """GET ``url`` and return only the status code (the body is discarded)."""
        async with self.session().get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            await response.read()
            return response.status


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_unset=True)
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__} as JSON")


def _decode(url: str, status: int, body: bytes) -> Any:
    if status >= 400:
        raise BackendHTTPError(status, url, body[:2000].decode("utf-8", errors="replace"))
    if not body.strip():
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BackendProtocolError(f"{url} answered HTTP {status} with a body that is not JSON") from exc
