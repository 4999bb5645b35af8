"""Turning SIGTERM/SIGINT into a stop flag, so long-running tools end cleanly and keep their output."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def stop_on_signals(announce: str | None = None) -> Iterator[threading.Event]:
    """Yield an event that SIGTERM/SIGINT set (instead of killing the process).

    The previous handlers are restored on exit. Outside the main thread (where Python cannot install
    handlers) the event is simply never set by signals. ``announce``: a program name to print a
    one-line notice under, on stderr, when a signal arrives.
    """
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, _frame: Any) -> None:
        if announce:
            print(f"{announce}: received signal {signum}, finishing", file=sys.stderr, flush=True)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
