"""The fast client's connection slots (adapters/http_slots.py): first come first
served, never lost when a wait ends (a timeout, a cancellation), even at the moment
a slot is handed over; a full pool's wait past `pool_wait` is a PoolTimeout."""

from __future__ import annotations

import asyncio

import pytest

from adapters.http_client import ConnectionPool, PoolTimeout
from adapters.http_slots import Slots


async def test_waiters_get_the_slots_in_the_order_they_came() -> None:
    slots = Slots(0)
    order: list[str] = []

    async def wait(name: str) -> None:
        await slots.wait(None)
        order.append(name)

    tasks = [asyncio.create_task(wait(n)) for n in ("a", "b", "c")]
    await asyncio.sleep(0)
    for _ in tasks:
        slots.release()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"] and slots.free == 0


async def test_a_released_slot_nobody_waits_for_is_free_again() -> None:
    slots = Slots(0)
    slots.release()
    assert slots.free == 1


async def test_a_cancelled_waiter_takes_no_slot_and_leaves_the_queue() -> None:
    slots = Slots(0)
    task = asyncio.create_task(slots.wait(1.0))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not slots.waiters
    slots.release()
    assert slots.free == 1


async def test_a_slot_handed_over_as_the_waiter_is_cancelled_is_given_back() -> None:
    slots = Slots(0)
    task = asyncio.create_task(slots.wait(1.0))
    await asyncio.sleep(0)
    slots.release()  # the slot is the waiter's now...
    task.cancel()  # ...but it leaves before it runs again
    with pytest.raises(asyncio.CancelledError):
        await task
    assert slots.free == 1 and not slots.waiters


async def test_a_full_pools_wait_past_pool_wait_is_a_pool_timeout_and_holds_nothing() -> None:
    pool = ConnectionPool("http://127.0.0.1:9", limit=1, pool_wait=0.01)
    pool._slots.free = 0  # the one connection is in use
    with pytest.raises(PoolTimeout) as info:
        await pool._acquire()
    assert info.value.waited_s == 0.01 and not pool._slots.waiters
    pool._slots.release()
    assert pool._slots.free == 1


async def test_every_release_nobody_waits_for_adds_one_free_slot() -> None:
    slots = Slots(2)
    slots.release()
    slots.release()
    assert slots.free == 4


async def test_a_waiter_cancelled_and_skipped_by_a_release_before_it_runs_only_leaves() -> None:
    slots = Slots(0)
    task = asyncio.create_task(slots.wait(1.0))
    await asyncio.sleep(0)
    task.cancel()  # its slot future is cancelled now...
    slots.release()  # ...so this release skips it (and takes it off the queue) before the waiter runs again
    with pytest.raises(asyncio.CancelledError):
        await task
    assert slots.free == 1 and not slots.waiters


@pytest.mark.parametrize("limit", [1, 3])
async def test_take_has_a_free_slot_at_once_when_nobody_waits(limit) -> None:
    slots = Slots(limit)
    await slots.take(0.05)  # no wait: a timeout this short is never reached
    assert slots.free == limit - 1 and not slots.waiters


async def test_take_without_a_free_slot_waits_its_timeout_in_the_queue() -> None:
    slots = Slots(0)
    task = asyncio.create_task(slots.take(0.01))
    await asyncio.sleep(0)
    assert len(slots.waiters) == 1 and slots.free == 0  # queued, not taken
    done, _ = await asyncio.wait({task}, timeout=5.0)  # the take's own timeout ends it, not this one
    assert task in done and isinstance(task.exception(), TimeoutError)
    assert slots.free == 0 and not slots.waiters
