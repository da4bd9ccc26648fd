"""adapters/native_work.py's bounds at their boundaries: a tenant may have exactly
`per_tenant` pieces waiting and the pool exactly `max_waiting` in all; one more is a 429
`tokenizer_busy`, and the piece running on a worker counts toward neither."""

from __future__ import annotations

import asyncio
import threading

import pytest

from adapters.errors import GatewayError
from adapters.native_work import TextWork


async def busy_worker(work: TextWork, gate: threading.Event) -> asyncio.Future:
    """The pool's one worker taken by a piece that runs until `gate` is set."""
    running = asyncio.ensure_future(work.run("holder", lambda: gate.wait(30)))
    for _ in range(100):
        await asyncio.sleep(0)
        if work.running == 1:
            return running
    raise AssertionError("the first piece never started")


async def refused(work: TextWork, tenant: str) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await work.run(tenant, lambda: None)
    assert (info.value.status, info.value.code) == (429, "tokenizer_busy")
    return info.value


@pytest.mark.parametrize("limit", [1, 3])
async def test_a_tenant_may_have_per_tenant_pieces_waiting_and_not_one_more(limit) -> None:
    work, gate = TextWork(workers=1, per_tenant=limit, max_waiting=100), threading.Event()
    running = await busy_worker(work, gate)
    waiting = [asyncio.ensure_future(work.run("t", lambda: "done")) for _ in range(limit)]
    await asyncio.sleep(0)
    assert work.waiting("t") == limit  # all of them taken
    await refused(work, "t")
    assert work.refused == 1
    other = asyncio.ensure_future(work.run("other", lambda: "done"))  # another tenant is not held back
    gate.set()
    assert await asyncio.gather(*waiting, other) == ["done"] * (limit + 1)
    await running


async def test_the_pool_may_hold_max_waiting_pieces_in_all_and_not_one_more() -> None:
    work, gate = TextWork(workers=1, per_tenant=100, max_waiting=3), threading.Event()
    running = await busy_worker(work, gate)
    waiting = [asyncio.ensure_future(work.run(f"t{i}", lambda: "done")) for i in range(3)]
    await asyncio.sleep(0)
    assert work.waiting() == 3
    await refused(work, "t9")  # a tenant with nothing waiting: the pool is full
    gate.set()
    assert await asyncio.gather(*waiting) == ["done"] * 3
    await running
    assert await work.run("t9", lambda: "later") == "later"  # room again once they ran
