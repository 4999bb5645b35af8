"""uvicorn's httptools protocol, writing each response's head and first body part together.

uvicorn writes the status line and headers to the socket as soon as the app sends
``http.response.start`` and the body separately, so every small JSON answer costs two ``send``
system calls, two TCP segments and, on a busy machine, often two wake-ups of the client (the
first read finds only the head). :class:`CoalescingHttpToolsProtocol` holds the head back
until the first ``http.response.body`` message and writes both with one call. Bytes and their
order on the wire are unchanged; only the number of writes drops.

:func:`http_protocol` returns the class to give ``uvicorn.run(http=...)``, or ``"auto"`` when
httptools (or the uvicorn internals this relies on) is not available.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: Bodies up to this size are joined to the head in one buffer; larger ones are written after
#: it (copying a large body to save one system call is not worth it).
COALESCE_MAX_BYTES = 256 * 1024


class _HeadHoldingTransport:
    """Wraps a connection's transport for one request/response cycle.

    The first write after the response started (the head) is held and written together with the
    next one (the first body part). Writes before the response starts (``100 Continue``) pass
    straight through; every other attribute is the real transport's.
    """

    __slots__ = ("_transport", "_cycle", "_head")

    def __init__(self, transport: asyncio.Transport, cycle: Any):
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None  # None: head not seen yet; b"": already written

    def write(self, data: bytes) -> None:
        head = self._head
        if head is None:
            if self._cycle.response_started:
                self._head = data
                return
            self._transport.write(data)
            return
        if head:
            self._head = b""
            if len(data) <= COALESCE_MAX_BYTES:
                self._transport.write(head + data)
                return
            self._transport.write(head)
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is part of uvicorn[standard]
    HttpToolsProtocol = None


if HttpToolsProtocol is not None:

    class CoalescingHttpToolsProtocol(HttpToolsProtocol):
        """:class:`HttpToolsProtocol` whose responses go out in as few writes as possible."""

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            cycle = self.cycle
            # Upgrades return without a new cycle; the previous one is already wrapped then.
            # HEAD responses never write a body, so their head must go out at once.
            if (
                cycle is not None
                and getattr(cycle, "transport", None) is self.transport
                and cycle.scope.get("method") != "HEAD"
            ):
                cycle.transport = _HeadHoldingTransport(self.transport, cycle)


def http_protocol() -> Any:
    """The protocol class for ``uvicorn.run(http=...)`` (``"auto"`` without httptools).

    A module-level class, so that ``--reload`` can hand it to its worker process.
    """
    if HttpToolsProtocol is None:  # pragma: no cover
        return "auto"
    return CoalescingHttpToolsProtocol
