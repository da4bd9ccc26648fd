"""adapters/native_work.py's bounds at their boundaries: a tenant may have exactly
`per_tenant` pieces waiting and the pool exactly `max_waiting` in all; one more is a 429
`tokenizer_busy`, and the piece running on a worker counts toward neither."""

from __future__ import annotations

import asyncio
import threading
import time

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


async def test_a_refusal_says_why_and_when_to_retry_and_every_one_is_counted() -> None:
    work, gate = TextWork(workers=1, per_tenant=1, max_waiting=10), threading.Event()
    running = await busy_worker(work, gate)
    waiting = asyncio.ensure_future(work.run(None, lambda: "done"))  # no tenant: the "" queue
    await asyncio.sleep(0)
    assert work.waiting("") == 1
    for _ in range(2):
        err = await refused(work, None)
        assert (str(err), err.retry_after) == (
            "Too many of your requests are waiting to be tokenized on this model; retry shortly.",
            1.0,
        )
    assert work.refused == 2
    gate.set()
    assert await waiting == "done"
    await running


async def test_a_piece_cancelled_before_it_started_leaves_its_queue_and_never_runs() -> None:
    work, gate = TextWork(workers=1), threading.Event()
    running = await busy_worker(work, gate)
    ran: list[str] = []
    first = asyncio.ensure_future(work.run("t", lambda: ran.append("first")))
    second = asyncio.ensure_future(work.run("t", lambda: ran.append("second") or "second"))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert work.waiting("t") == 1  # the other one still waits its turn
    gate.set()
    assert await asyncio.wait_for(second, 10) == "second" and ran == ["second"]
    await running
    assert "t" not in work._queues


async def test_a_piece_cancelled_as_a_worker_frees_up_is_passed_over_for_the_next() -> None:
    work, gate = TextWork(workers=1), threading.Event()
    running = await busy_worker(work, gate)
    first = asyncio.ensure_future(work.run("a", lambda: "a"))
    second = asyncio.ensure_future(work.run("b", lambda: threading.current_thread().name))
    await asyncio.sleep(0)
    gate.set()
    time.sleep(0.3)  # the loop held: the worker's finish is queued on it before the cancellation below
    first.cancel()
    name = await asyncio.wait_for(second, 10)
    assert name.startswith("native-text") and first.cancelled()
    await running


async def test_no_more_pieces_run_at_once_than_there_are_workers() -> None:
    work, gate = TextWork(workers=2), threading.Event()
    pieces = [asyncio.ensure_future(work.run(f"t{i}", lambda: gate.wait(30))) for i in range(3)]
    await asyncio.sleep(0)
    assert (work.running, work.waiting()) == (2, 1)
    gate.set()
    assert await asyncio.gather(*pieces) == [True] * 3
    assert work.running == 0


async def test_a_piece_that_fails_raises_its_error_to_the_caller() -> None:
    def fails() -> None:
        raise ValueError("bad template")

    work = TextWork(workers=1)
    with pytest.raises(ValueError, match="bad template"):
        await asyncio.wait_for(work.run("t", fails), 10)
    assert await work.run("t", lambda: "next") == "next" and work.running == 0
