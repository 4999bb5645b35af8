"""Exceptions raised by the inference-server clients, and the retry policy that classifies them.

Only transient failures are retried: connection problems, timeouts, HTTP 408/409/429 and 5xx. A
request the backend rejects as invalid (any other 4xx) fails at once with the backend's message,
and callers always receive the original exception, never a wrapper from the retry library.
"""

from __future__ import annotations

import asyncio

import aiohttp
import openai

#: HTTP statuses that are worth retrying (besides every 5xx).
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})


class BackendHTTPError(RuntimeError):
    """An inference backend answered with an HTTP error status.

    Attributes:
        status: the HTTP status code.
        url: the URL that was requested.
        body: (a prefix of) the response body, for the error message.
    """

    def __init__(self, status: int, url: str, body: str = ""):
        self.status = status
        self.url = url
        self.body = body
        snippet = body.strip().replace("\n", " ")[:500]
        super().__init__(f"{url} answered HTTP {status}" + (f": {snippet}" if snippet else ""))


class ServerUnavailableError(RuntimeError):
    """No healthy inference server became available before the request's deadline."""


class BackendProtocolError(RuntimeError):
    """A backend answered 2xx but with a body that does not follow the expected contract."""


def status_is_retryable(status: int) -> bool:
    """True for HTTP statuses that signal a transient condition (408/409/425/429 and 5xx)."""
    return status >= 500 or status in RETRYABLE_STATUSES


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed inference request should be attempted again.

    Retryable: connection errors, timeouts, and HTTP 408/409/425/429/5xx answers. Not retryable:
    every other HTTP 4xx (bad request, authentication, unknown model ...), protocol violations,
    programming errors (``ValueError``, ``TypeError``, ``NotImplementedError`` ...), cancellation
    and :class:`ServerUnavailableError` (its deadline already elapsed).
    """
    if isinstance(exc, (ServerUnavailableError, asyncio.CancelledError)):
        return False
    if isinstance(exc, openai.APIStatusError):
        return status_is_retryable(exc.status_code)
    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
        return True
    if isinstance(exc, BackendHTTPError):
        return status_is_retryable(exc.status)
    if isinstance(exc, aiohttp.ContentTypeError):
        # A 2xx answer that is not JSON (e.g. an HTML page from a proxy in front of the server).
        return True
    if isinstance(exc, aiohttp.ClientResponseError):
        return status_is_retryable(exc.status)
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    return False


def describe_failure(exc: BaseException) -> str:
    """A short, one-line reason for a failed request or health probe, for log lines and errors.

    Examples: ``cannot connect (Connect call failed ('127.0.0.1', 9))``, ``no answer within the timeout``,
    ``http://h/v1/models answered HTTP 503``.
    """
    if isinstance(exc, aiohttp.ClientConnectorError):
        reason = getattr(exc, "os_error", None)
        detail = getattr(reason, "strerror", None) or str(reason or exc)
        return f"cannot connect ({detail})"
    if isinstance(
        exc, (asyncio.TimeoutError, TimeoutError, aiohttp.ServerTimeoutError, openai.APITimeoutError)
    ):
        return "no answer within the timeout"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"cannot connect ({cause})" if cause is not None else "cannot connect"
    if isinstance(exc, ConnectionError):
        return f"cannot connect ({exc.strerror or exc})"
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_connection_failure(exc: BaseException) -> bool:
    """True when ``exc`` means the server could not be reached at all (used to mark it unhealthy)."""
    if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
        return True
    return isinstance(exc, (aiohttp.ClientConnectionError, ConnectionError)) and not isinstance(
        exc, aiohttp.ServerTimeoutError
    )
