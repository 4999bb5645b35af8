"""Measuring whether the running event loop stays responsive while a test awaits something slow."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass
class Ticks:
    """How many times the ticking task woke up so far."""

    count: int = 0


@contextlib.asynccontextmanager
async def count_ticks(interval: float) -> AsyncIterator[Ticks]:
    """Run a task that sleeps ``interval`` seconds and counts one tick per wake-up, for the ``async with`` block.

    A block that lasts about ``n * interval`` seconds ends with close to ``n`` ticks only if nothing blocked the
    event loop meanwhile. The task is cancelled when the block ends, so ``count`` is final after it.
    """
    ticks = Ticks()

    async def tick() -> None:
        while True:
            await asyncio.sleep(interval)
            ticks.count += 1

    task = asyncio.create_task(tick())
    try:
        yield ticks
    finally:
        task.cancel()
