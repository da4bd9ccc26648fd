"""The admission queue's details beside tests/policies/test_admission.py: the
defaults, units in and out of the queue, the head that is not overtaken, which
tenant a full queue pushes out, the Retry-After estimate and the error texts, and a
slot dispatched while its client was leaving.

The capacity functions here look the model up strictly (`caps[model]`), so a
step that asked for the wrong model's capacity fails instead of passing by luck."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from adapters.base import LoadSnapshot
from adapters.errors import GatewayError
from policies.admission import AdmissionQueue, BackendLoad, model_capacity


def strict(caps: dict[str, int], **kw) -> AdmissionQueue:
    kw.setdefault("max_queue", 100)
    kw.setdefault("max_wait_s", 5.0)
    kw.setdefault("poll_s", 0.01)
    return AdmissionQueue(capacity=lambda model: caps[model], **kw)


async def queued(q: AdmissionQueue, count: int, tenant: str = "a", tier: int = 1, model: str = "m", **enter):
    """`count` requests started and seen waiting in `q` (on its count, not a clock)."""
    expected = q.waiting(model) + count
    tasks = []
    for _ in range(count):
        tasks.append(asyncio.create_task(q.enter(model, tenant, tier, **enter)))
        await asyncio.sleep(0)  # each is queued in turn: the newest is the last
    deadline = time.monotonic() + 10
    while q.waiting(model) < expected:
        assert time.monotonic() < deadline, f"{count} requests never queued"
        await asyncio.sleep(0.001)
    return tasks


async def settled(tasks) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def pushed_out(task) -> GatewayError:
    with pytest.raises(GatewayError) as exc:
        await asyncio.wait_for(task, 1)
    return exc.value


# ---- defaults and counts -------------------------------------------------------------


async def test_without_a_capacity_the_queue_is_unbounded_and_a_full_one_answers_429():
    q = AdmissionQueue(max_queue=1, max_wait_s=5)
    slots = [await asyncio.wait_for(q.enter("m", "a", 1), 1) for _ in range(20)]
    assert q.in_flight("m") == 20
    for s in slots:
        q.release(s)
    caps = {"m": 0}
    q.set_capacity_provider(lambda model: caps[model])
    waiting = await queued(q, 1)
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "a", 1)
    assert exc.value.status == 429 and exc.value.code == "queue_full"
    await settled(waiting)


async def test_counts_of_a_model_never_seen_are_zero_and_models_lists_those_seen():
    q = strict({"m": 1, "n": 1})
    assert (q.in_flight("x"), q.waiting("x"), q.models()) == (0, 0, [])
    q.release(await q.enter("m", "a", 1))
    await q.enter("n", "a", 1)
    assert q.models() == ["m", "n"]
    assert (q.in_flight("m"), q.in_flight("n"), q.in_flight("x")) == (0, 1, 0)


async def test_the_default_poll_notices_capacity_that_rises_without_a_release():
    caps, checks = {"m": 0}, []

    def capacity(model: str) -> int:
        checks.append(time.monotonic())
        return caps[model]

    q = AdmissionQueue(max_queue=10, max_wait_s=60, capacity=capacity)
    (task,) = await queued(q, 1)
    deadline = time.monotonic() + 30
    while len(checks) < 7:  # its arrival's two checks, then five polls
        assert time.monotonic() < deadline, f"{len(checks)} capacity checks"
        await asyncio.sleep(0.01)
    gaps = [b - a for a, b in zip(checks[1:], checks[2:])]
    # A tenth of a second between checks: never less (a timer's floor), and not more in
    # the shortest of five gaps (a loaded machine would have to stretch every one of them)
    assert min(gaps) >= 0.09 and min(gaps) < 0.5, gaps
    caps["m"] = 1
    q.release(await asyncio.wait_for(task, 30))  # the rise is noticed without a release


# ---- units ---------------------------------------------------------------------------


async def test_a_slot_with_room_is_not_queued_and_holds_its_units():
    q = strict({"m": 4})
    slot = await q.enter("m", "a", 1, units=3)
    assert (slot.waited_s, slot.units, q.in_flight("m")) == (0.0, 3, 3)
    q.release(slot)
    assert q.in_flight("m") == 0


async def test_a_queued_slot_says_how_long_it_waited_and_holds_its_units():
    q = strict({"m": 4})
    held = await q.enter("m", "a", 1, units=4)
    (task,) = await queued(q, 1, units=3)
    t0 = time.monotonic()
    await asyncio.sleep(0.05)
    q.release(held)
    slot = await asyncio.wait_for(task, 1)
    assert 0.05 <= slot.waited_s <= time.monotonic() - t0 + 0.05
    assert (slot.units, q.in_flight("m")) == (3, 3)
    q.release(slot)
    assert q.in_flight("m") == 0


async def test_a_dispatch_adds_to_what_is_already_in_flight():
    caps = {"m": 1}
    q = strict(caps)
    held = await q.enter("m", "a", 1)
    (task,) = await queued(q, 1)
    caps["m"] = 2  # the waiter's next poll sees the room
    slot = await asyncio.wait_for(task, 1)
    assert q.in_flight("m") == 2
    q.release(slot)
    q.release(held)
    assert q.in_flight("m") == 0


async def test_a_request_larger_than_the_capacity_runs_alone():
    caps = {"m": 1}
    q = strict(caps)
    big = await asyncio.wait_for(q.enter("m", "a", 1, units=3), 1)  # nothing in flight: it runs
    (small,) = await queued(q, 1)
    q.release(big)
    q.release(await asyncio.wait_for(small, 1))
    # With anything in flight it waits until that is done.
    caps["m"] = 2
    held = await q.enter("m", "a", 1)
    (task,) = await queued(q, 1, units=3)
    await asyncio.sleep(0.03)
    assert not task.done()
    q.release(held)
    slot = await asyncio.wait_for(task, 1)
    assert q.in_flight("m") == 3
    q.release(slot)


async def test_a_large_request_at_the_head_is_not_overtaken_by_a_small_one():
    q = strict({"m": 4})
    held = await q.enter("m", "a", 1, units=2)
    (big,) = await queued(q, 1, units=3)  # 2 + 3 > 4: waits
    (small,) = await queued(q, 1, tenant="b")  # 2 + 1 would fit, but it is behind
    await asyncio.sleep(0.03)
    assert not big.done() and not small.done()
    q.release(held)
    slots = [await asyncio.wait_for(t, 1) for t in (big, small)]
    assert q.in_flight("m") == 4
    for s in slots:
        q.release(s)


async def test_the_room_checked_is_that_of_the_band_served_first():
    q = strict({"m": 2})
    held = await q.enter("m", "a", 1)
    (low,) = await queued(q, 1, tier=1, units=2)  # 1 + 2 > 2: waits
    high = await asyncio.wait_for(q.enter("m", "b", 2), 1)  # the higher band's head fits: served now
    assert q.in_flight("m") == 2 and not low.done()
    q.release(high)
    q.release(held)
    q.release(await asyncio.wait_for(low, 1))


# ---- a slot dispatched while its client was leaving -----------------------------------


async def test_a_slot_dispatched_as_its_task_is_cancelled_goes_to_the_next_one():
    q = strict({"m": 1})
    held = await q.enter("m", "a", 1)
    first, second = await queued(q, 2)
    q.release(held)  # dispatches `first` at once ...
    first.cancel()  # ... which is cancelled before it could take the slot
    with pytest.raises(asyncio.CancelledError):
        await first
    slot = await asyncio.wait_for(second, 1)
    assert q.in_flight("m") == 1
    q.release(slot)
    assert q.in_flight("m") == 0


# ---- a full queue: who is pushed out ------------------------------------------------------


async def test_of_two_tenants_holding_as_many_places_the_lower_band_gives_one_up():
    q = strict({"m": 0}, max_queue=4)
    low = await queued(q, 2, tenant="low", tier=1)
    high = await queued(q, 2, tenant="high", tier=2)
    newcomer = asyncio.create_task(q.enter("m", "new", 2))
    err = await pushed_out(low[1])  # the lower band's newest
    assert err.code == "queue_full" and "model `m`" in err.message
    assert not low[0].done() and not any(t.done() for t in high)
    assert q.waiting("m") == 4 and not newcomer.done()
    await settled([*low[:1], *high, newcomer])


async def test_a_band_above_the_newcomer_does_not_stop_the_search_below_it():
    q = strict({"m": 0}, max_queue=4)
    flood = await queued(q, 3, tenant="flood", tier=1)
    vip = await queued(q, 1, tenant="vip", tier=3)
    mid = asyncio.create_task(q.enter("m", "mid", 2))
    await pushed_out(flood[2])
    assert q.waiting("m") == 4 and not mid.done()
    await settled([*flood[:2], *vip, mid])


async def test_a_push_out_never_leaves_the_pusher_holding_more_than_the_pushed():
    # a holds 2, b holds 1: b taking one of a's would leave b 2 against a's 1.
    q = strict({"m": 0}, max_queue=4)
    tasks = await queued(q, 2, tenant="a") + await queued(q, 1, tenant="b") + await queued(q, 1, tenant="c")
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "b", 1)
    assert exc.value.code == "queue_full"
    assert not any(t.done() for t in tasks)
    await settled(tasks)


# ---- Retry-After and the error texts -------------------------------------------------------


async def test_retry_after_is_the_time_to_drain_those_waiting_at_the_recent_rate():
    caps = {"m": 100}
    q = strict(caps, max_wait_s=100)
    assert q.drain_retry_after("m") == 1.0  # no completion seen yet: one second
    assert strict(caps, max_wait_s=0.5).drain_retry_after("m") == 0.5  # never above the wait limit
    a0 = time.monotonic()
    q.release(await q.enter("m", "a", 1))
    a1 = time.monotonic()
    await asyncio.sleep(0.3)
    q.release(await q.enter("m", "a", 1))
    caps["m"] = 0
    waiting = await queued(q, 9)
    b0 = time.monotonic()
    estimate = q.drain_retry_after("m")
    b1 = time.monotonic()
    # 2 completions since the first one: rate = 2 / span; 9 waiting + the newcomer.
    assert (9 + 1) * (b0 - a1) / 2 <= estimate <= (9 + 1) * (b1 - a0) / 2
    await settled(waiting)


async def test_a_full_queue_names_the_model_and_its_retry_after_follows_the_drain():
    q = strict({"m": 1}, max_queue=1, max_wait_s=0.5)
    q.release(await q.enter("m", "a", 1))  # one completion seen
    held = await q.enter("m", "a", 1)
    waiting = await queued(q, 1)
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "a", 1)
    assert exc.value.message == "The queue for model `m` is full (1 waiting); retry later."
    assert exc.value.retry_after == 1.0  # at least a second once a rate is known (0.5 before)
    q.release(held)
    q.release(await asyncio.wait_for(waiting[0], 1))


async def test_a_queue_timeout_says_how_long_it_waited_and_when_to_retry():
    q = strict({"m": 1}, max_wait_s=0.1)
    held = await q.enter("m", "a", 1)
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "a", 1)
    assert exc.value.status == 503 and exc.value.retry_after == 0.1  # no rate yet: the wait limit
    m = re.fullmatch(
        r"The request waited (\d+\.\d)s in the queue for model `m` and passed its deadline\.", exc.value.message
    )
    assert m and 0.1 <= float(m.group(1)) < 5, exc.value.message
    q.release(held)  # a completion: now the estimate is at least a second
    held = await q.enter("m", "a", 1)
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "a", 1)
    assert exc.value.retry_after == 1.0
    q.release(held)


# ---- model_capacity ------------------------------------------------------------------


def test_capacity_adds_every_saturated_backend_in_any_position():
    full_kv = LoadSnapshot(kv_usage=0.9)
    assert model_capacity([BackendLoad(8, 2, None), BackendLoad(4, 3, full_kv)]) == 8 + 3
    assert model_capacity([BackendLoad(4, 1, full_kv), BackendLoad(4, 2, full_kv)]) == 1 + 2


def test_capacity_judges_freshness_by_the_given_clock():
    busy = LoadSnapshot(waiting=9, read_at=999.0)
    assert model_capacity([BackendLoad(4, 1, busy)], now=1000.0) == 1  # fresh at 1000: full
    assert model_capacity([BackendLoad(4, 1, busy)], now=2000.0) == 4  # stale: max_inflight decides


async def test_a_client_deadline_says_how_long_the_request_waited():
    q = strict({"m": 1}, max_wait_s=10)
    held = await q.enter("m", "a", 1)
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "a", 1, deadline=time.monotonic() + 0.1)
    m = re.fullmatch(
        r"The request did not complete within the timeout the client set: it waited (\d+\.\d) s in the queue "
        r"for model `m`\.",
        exc.value.message,
    )
    assert m and 0.1 <= float(m.group(1)) < 5, exc.value.message
    q.release(held)
