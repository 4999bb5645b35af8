"""Listening sockets on the host, for tests that check what a sandboxed program can reach."""

from __future__ import annotations

import socket
from typing import Any


def host_listener(
    family: socket.AddressFamily = socket.AF_INET, address: Any = ("127.0.0.1", 0)
) -> socket.socket:
    """A stream socket of ``family`` bound to ``address``, listening and non-blocking.

    ``getsockname()`` gives the address to connect to (the port the system chose for ``("127.0.0.1", 0)``);
    ``accept()`` raises ``BlockingIOError`` as long as no connection has arrived. The caller closes it.
    """
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(1)
    listener.setblocking(False)
    return listener
