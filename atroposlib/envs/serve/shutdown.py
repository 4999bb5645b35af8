"""Stopping a ``serve`` run: the shutdown request, the loop's wake-up event and SIGTERM/SIGINT handling.

:class:`ShutdownControl` belongs to an :class:`~atroposlib.envs.serve.runtime.EnvRunner`. The first signal asks
for a graceful stop (work being sent is finished); a second one stops at once through the ``stop_now``
callback the runner passes to :meth:`ShutdownControl.open`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from typing import Optional

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")


class ShutdownControl:
    """Whether a run should stop, and the events that wake its loop.

    ``phase`` is ``"idle"`` outside a run, then ``"startup"``, ``"running"`` and ``"stopping"``. The events
    exist only between :meth:`open` and :meth:`close`; outside a run :meth:`sleep` and :meth:`wait_for_wakeup`
    just sleep and :attr:`in_run` is False.
    """

    def __init__(self, label: Callable[[], str]) -> None:
        self._label = label
        self.requested = False
        self.stop_now = False
        self.phase = "idle"
        self.main_task: Optional[asyncio.Task] = None
        self.wakeup: Optional[asyncio.Event] = None
        self._event: Optional[asyncio.Event] = None
        self._installed: list[int] = []
        self._on_stop_now: Callable[[], None] = lambda: None

    @property
    def in_run(self) -> bool:
        """True between :meth:`open` and :meth:`close` (workers then finish their items in separate tasks)."""
        return self.wakeup is not None

    def open(self, on_stop_now: Callable[[], None]) -> None:
        """Start a run in the current task: fresh events, phase ``startup``, signal handlers installed."""
        self.main_task = asyncio.current_task()
        self.wakeup = asyncio.Event()
        self._event = asyncio.Event()
        self.requested = False
        self.stop_now = False
        self.phase = "startup"
        self._on_stop_now = on_stop_now
        self._install_signal_handlers()

    def close(self) -> None:
        """End the run: signal handlers removed, events dropped, phase ``idle``."""
        self._remove_signal_handlers()
        self.phase = "idle"
        self.wakeup = None
        self._event = None
        self.main_task = None

    def request(self, reason: str = "requested") -> None:
        """Ask the run to stop gracefully (safe to call from the event loop thread)."""
        if not self.requested:
            logger.info("[%s] shutting down (%s)", self._label(), reason)
        self.requested = True
        if self._event is not None:
            self._event.set()
        self.wake()

    def wake(self) -> None:
        """Wake the loop (a worker finished, or a stop was requested)."""
        if self.wakeup is not None:
            self.wakeup.set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; returns True early (or at once) when shutdown was requested."""
        if self.requested:
            return True
        if self._event is None:
            await asyncio.sleep(seconds)
        else:
            try:
                await asyncio.wait_for(self._event.wait(), seconds)
            except asyncio.TimeoutError:
                pass
        return self.requested

    async def wait_for_wakeup(self, timeout: float) -> None:
        """Wait until :meth:`wake` is called, shutdown is requested, or ``timeout`` seconds pass."""
        if self.wakeup is None:
            await asyncio.sleep(timeout)
            return
        try:
            await asyncio.wait_for(self.wakeup.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        self.wakeup.clear()

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self.requested:
            self.request(f"received {name}")
            if self.phase == "startup" and self.main_task is not None:
                self.main_task.cancel()
            return
        logger.warning(
            "[%s] second %s: stopping now; groups still being sent are saved locally", self._label(), name
        )
        self.stop_now = True
        self._on_stop_now()
        if self.phase == "startup" and self.main_task is not None:
            self.main_task.cancel()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                self._installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def _remove_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        self._installed = []


__all__ = ["ShutdownControl"]
