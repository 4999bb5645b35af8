"""The weighted semaphore that bounds the requests an environment sends to one inference server.

compat: ``AsyncSemWithAdaptiveWeight`` is importable from
:mod:`atroposlib.envs.server_handling.server_baseline`, where atroposlib 0.4.0 defined it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable


class Listeners:
    """Zero-argument callbacks to call on a change (lets ``ServerManager`` wait without polling)."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []

    def add(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def discard(self, callback: Callable[[], None]) -> None:
        """Remove one registration of ``callback``; one that is not registered is ignored."""
        with contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    def notify(self) -> None:
        """Call every callback (a callback may add or remove listeners while this runs)."""
        for callback in list(self._callbacks):
            callback()


class AsyncSemWithAdaptiveWeight:
    """An asyncio semaphore whose usable size is ``max_val * weight``.

    ``weight`` is the environment's share of the inference fleet (from the trajectory API); the
    semaphore hands out a slot while fewer than ``max_val * weight`` are in use (at least one slot
    is always usable, so a momentary weight of 0 cannot deadlock a run). Waiters are served first
    come, first served. Lowering the weight never revokes slots already held.

    compat: the interface of atroposlib 0.4.0's class of this name: ``max_val``, ``weight``, ``min_val()``,
    ``update_weight(w)``, ``locked()``, ``acquire()``/``release()``, ``async with``, and a read-only
    ``_value`` (free slots counted against ``max_val``, like ``asyncio.Semaphore._value``); it does not
    subclass ``asyncio.Semaphore`` or touch its private state.
    """

    def __init__(self, value: int):
        if value < 0:
            raise ValueError(f"semaphore size must be >= 0, got {value}")
        self.max_val = value
        self.weight = 1.0
        self._in_use = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._listeners = Listeners()

    # -- state -----------------------------------------------------------------------------------
    def min_val(self) -> float:
        """The free-slot level below which no slot is handed out: ``max_val * (1 - weight)``."""
        return self.max_val * (1.0 - self.weight)

    @property
    def limit(self) -> float:
        """Usable concurrency right now: ``max_val * weight``, never below one slot."""
        return max(self.max_val * self.weight, 1.0 if self.max_val > 0 else 0.0)

    @property
    def value(self) -> int:
        """Free slots counted against ``max_val`` (``max_val - in_use``)."""
        return self.max_val - self._in_use

    @property
    def _value(self) -> int:
        return self.value

    @property
    def in_use(self) -> int:
        """Slots currently held."""
        return self._in_use

    def available(self) -> float:
        """Slots that can be acquired right now without waiting (0 when waiters are queued)."""
        if self._waiters:
            return 0.0
        return max(0.0, self.limit - self._in_use)

    def locked(self) -> bool:
        """True if :meth:`acquire` would have to wait."""
        return bool(self._waiters) or self._in_use >= self.limit

    # -- weight ----------------------------------------------------------------------------------
    def update_weight(self, weight: float) -> None:
        """Set the share (clamped to [0, 1]) and wake waiters that now fit."""
        self.weight = min(1.0, max(0.0, float(weight)))
        self._wake()
        self._listeners.notify()

    # -- acquire / release -----------------------------------------------------------------------
    async def acquire(self) -> bool:
        """Take a slot, waiting (FIFO) until one is usable. Always returns True."""
        if not self._waiters and self._in_use < self.limit:
            self._in_use += 1
            return True
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # The slot was handed over just before the cancellation landed: give it back.
                self._in_use -= 1
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            self._wake()
            self._listeners.notify()
            raise
        return True

    def release(self) -> None:
        """Return a slot; raises ``ValueError`` if none is held."""
        if self._in_use <= 0:
            raise ValueError("AsyncSemWithAdaptiveWeight released more times than acquired")
        self._in_use -= 1
        self._wake()
        self._listeners.notify()

    def _wake(self) -> None:
        # Slots are handed over directly to waiters (counted at grant time), so a coroutine that
        # arrives between the grant and the waiter resuming cannot steal them.
        while self._waiters and self._in_use < self.limit:
            fut = self._waiters.popleft()
            if fut.done():
                continue
            self._in_use += 1
            fut.set_result(True)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self.release()

    # -- change notification (used by ServerManager to wait without polling) ----------------------
    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever a slot is released or the weight changes."""
        self._listeners.add(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.discard(callback)

    def __repr__(self) -> str:
        return (
            f"<AsyncSemWithAdaptiveWeight in_use={self._in_use} max_val={self.max_val} "
            f"weight={self.weight:.3f} waiters={len(self._waiters)}>"
        )


__all__ = ["AsyncSemWithAdaptiveWeight", "Listeners"]
