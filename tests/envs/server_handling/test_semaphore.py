"""AsyncSemWithAdaptiveWeight: weighted concurrency without asyncio internals."""

from __future__ import annotations

import asyncio

import pytest

from atroposlib.envs.server_handling.server_baseline import AsyncSemWithAdaptiveWeight


async def peak_concurrency(sem: AsyncSemWithAdaptiveWeight, tasks: int) -> int:
    active = 0
    peak = 0

    async def worker():
        nonlocal active, peak
        async with sem:
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.01)
            active -= 1

    await asyncio.gather(*[worker() for _ in range(tasks)])
    return peak


async def test_full_weight_allows_max_val():
    sem = AsyncSemWithAdaptiveWeight(8)
    assert await peak_concurrency(sem, 40) == 8
    assert sem.in_use == 0 and sem.value == 8 and sem._value == 8


@pytest.mark.parametrize(
    ("max_val", "weight", "expected"), [(10, 0.5, 5), (10, 0.25, 3), (512, 0.01, 6), (4, 0.0, 1)]
)
async def test_weight_limits_concurrency(max_val, weight, expected):
    sem = AsyncSemWithAdaptiveWeight(max_val)
    sem.update_weight(weight)
    assert sem.min_val() == pytest.approx(max_val * (1 - weight))
    assert await peak_concurrency(sem, 3 * max(expected, 4)) == expected


async def test_raising_weight_wakes_waiters():
    sem = AsyncSemWithAdaptiveWeight(4)
    sem.update_weight(0.25)
    await sem.acquire()
    waiter = asyncio.create_task(sem.acquire())
    await asyncio.sleep(0.01)
    assert not waiter.done() and sem.locked()
    sem.update_weight(1.0)
    await asyncio.wait_for(waiter, 1)
    assert sem.in_use == 2


async def test_lowering_weight_keeps_held_slots():
    sem = AsyncSemWithAdaptiveWeight(4)
    for _ in range(4):
        await sem.acquire()
    sem.update_weight(0.5)
    assert sem.in_use == 4 and sem.available() == 0
    for _ in range(3):
        sem.release()
    assert sem.available() == 1


async def test_waiters_are_served_in_order():
    sem = AsyncSemWithAdaptiveWeight(1)
    order = []
    await sem.acquire()

    async def waiter(i):
        async with sem:
            order.append(i)

    tasks = [asyncio.create_task(waiter(i)) for i in range(5)]
    await asyncio.sleep(0.01)
    sem.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]


async def test_cancelled_waiter_does_not_leak_a_slot():
    sem = AsyncSemWithAdaptiveWeight(1)
    await sem.acquire()
    cancelled = asyncio.create_task(sem.acquire())
    later = asyncio.create_task(sem.acquire())
    await asyncio.sleep(0.01)
    # Hand the slot over to the first waiter and cancel it before it resumes.
    sem.release()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await asyncio.wait_for(later, 1)
    assert sem.in_use == 1
    sem.release()
    assert sem.in_use == 0 and not sem.locked()


async def test_release_without_acquire_is_an_error():
    sem = AsyncSemWithAdaptiveWeight(2)
    with pytest.raises(ValueError, match="released more times"):
        sem.release()


async def test_listeners_fire_on_release_and_weight_change():
    sem = AsyncSemWithAdaptiveWeight(2)
    calls = []
    sem.add_listener(lambda: calls.append(1))
    await sem.acquire()
    sem.release()
    sem.update_weight(0.5)
    assert len(calls) == 2


def test_negative_size_rejected():
    with pytest.raises(ValueError):
        AsyncSemWithAdaptiveWeight(-1)
