"""HTTP response handling shared by the env runtime and the CLIs."""

from __future__ import annotations

import inspect
import logging
from typing import Any

_module_logger = logging.getLogger(__name__)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def parse_http_response(resp: Any, logger: logging.Logger | None = None) -> Any:
    """Return the JSON body of ``resp`` after checking its status.

    ``resp`` is an aiohttp-style response (``raise_for_status()`` and ``json()``/``text()``, sync or async).
    On a bad status or an unparsable body the status, message and body text are logged at ERROR level and
    the original exception is re-raised (so retry decorators see it).
    """
    log = logger or _module_logger
    try:
        resp.raise_for_status()
        return await _maybe_await(resp.json())
    except Exception as exc:
        try:
            body = await _maybe_await(resp.text())
        except Exception as text_exc:  # the body itself may be unreadable
            body = f"<unreadable body: {text_exc!r}>"
        status = (
            getattr(exc, "status", None)
            or getattr(resp, "status", None)
            or getattr(resp, "status_code", None)
        )
        log.error(
            "HTTP request failed. Status: %s, Message: %s. Response: %s",
            status if status is not None else "unknown",
            getattr(exc, "message", None) or str(exc),
            body,
        )
        raise
