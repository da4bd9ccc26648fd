"""The quota store's up/down state and its probe schedule (policies/quota_health.py),
with a scripted probe: the schedule is independent of traffic, bounded, and the
store is used again as soon as a probe gets an answer."""

from __future__ import annotations

import asyncio
import time

from policies.quota import QuotaStoreUnavailable
from policies.quota_health import StoreHealth, StoreTransition, stop_task


class ScriptedStore:
    """Answers probes only while `answering` is set; records when it was asked."""

    def __init__(self) -> None:
        self.answering = False
        self.asked: list[float] = []

    async def probe(self) -> None:
        self.asked.append(time.monotonic())
        if not self.answering:
            raise QuotaStoreUnavailable("refused")


async def probes(store: ScriptedStore, count: int) -> None:
    """Until the store was probed `count` times (a loaded machine only delays them)."""
    deadline = time.monotonic() + 30
    while len(store.asked) < count:
        assert time.monotonic() < deadline, f"{len(store.asked)} probes of {count}"
        await asyncio.sleep(0.01)


async def test_many_failures_make_one_transition_and_one_prober():
    store, seen = ScriptedStore(), []
    health = StoreHealth(store.probe, seen.append, first_delay_s=0.01, max_delay_s=0.05)
    started = time.monotonic()
    for _ in range(100):  # traffic that keeps failing
        health.mark_down("refused")
    assert not health.up
    assert seen == [StoreTransition(up=False, reason="refused")]
    await probes(store, 3)
    await asyncio.sleep(0.1)
    # one prober: at most one probe per 10 ms over the time it ran, however long a loaded
    # machine made that (a prober per failure would probe about a hundred times as often)
    assert len(store.asked) <= 1 + (time.monotonic() - started) / 0.01
    await health.aclose()


async def test_the_probe_delay_doubles_up_to_its_cap():
    store = ScriptedStore()
    health = StoreHealth(store.probe, lambda change: None, first_delay_s=0.02, max_delay_s=0.08)
    started = time.monotonic()
    health.mark_down("refused")
    await probes(store, 6)
    await health.aclose()
    elapsed = time.monotonic() - started
    gaps = [b - a for a, b in zip(store.asked, store.asked[1:])]
    assert gaps[0] >= 0.04 - 0.005  # 20 ms, then 40 ms, then 80 ms, capped
    assert all(g >= 0.08 - 0.005 for g in gaps[2:])
    assert len(store.asked) <= 2 + elapsed / 0.08


async def test_the_first_answer_brings_it_back_and_says_how_long_it_was_down():
    store, seen = ScriptedStore(), []
    health = StoreHealth(store.probe, seen.append, first_delay_s=0.01, max_delay_s=0.05)
    health.mark_down("refused")
    await asyncio.sleep(0.2)
    store.answering = True
    answered_at = time.monotonic()
    while not health.up:
        await asyncio.sleep(0.01)
    # within one capped delay, on any machine that runs this loop at all
    assert time.monotonic() - answered_at < 0.05 + 1.0
    assert [c.up for c in seen] == [False, True]
    assert seen[1].down_for_s >= 0.2
    asked = len(store.asked)
    await asyncio.sleep(0.2)
    assert len(store.asked) == asked  # up: no more probes
    health.mark_down("timeout")  # a second outage is a second transition
    assert [c.up for c in seen] == [False, True, False]
    await health.aclose()


async def test_a_probe_that_raises_something_else_does_not_end_the_probing():
    calls = []

    async def broken_then_fine() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("a bug in the probe")

    health = StoreHealth(broken_then_fine, lambda change: None, first_delay_s=0.01, max_delay_s=0.02)
    health.mark_down("refused")
    deadline = time.monotonic() + 5
    while not health.up:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    assert len(calls) == 3
    await health.aclose()


async def test_stop_task_ends_a_loop_that_lost_a_cancellation():
    lost = []

    async def loop_that_swallows_once() -> None:
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost.append(1)  # what Python 3.11's wait_for does when the call it wraps completes

    task = asyncio.create_task(loop_that_swallows_once())
    await asyncio.sleep(0.02)
    await asyncio.wait_for(stop_task(task), 5)
    assert task.cancelled() and lost == [1]
