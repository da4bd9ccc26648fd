"""The admission queue: capacity gating, priority bands, fairness between
tenants, bounds, deadlines and clients that leave."""

from __future__ import annotations

import asyncio
import time

import pytest

from adapters.errors import GatewayError
from policies.admission import AdmissionQueue, ClientGoneWhileQueued


def queue(cap: int | None, **kw) -> AdmissionQueue:
    kw.setdefault("max_queue", 100)
    kw.setdefault("max_wait_s", 5.0)
    return AdmissionQueue(capacity=lambda model: cap, poll_s=0.01, **kw)


async def queued(q: AdmissionQueue, count: int, tenant: str = "a", tier: int = 1, **enter) -> list[asyncio.Task]:
    """`count` requests of `tenant` for model "m", started and seen waiting in `q`
    (waits on the queue's own count, not on a clock)."""
    expected = q.waiting("m") + count
    tasks = [asyncio.create_task(q.enter("m", tenant, tier, **enter)) for _ in range(count)]
    deadline = time.monotonic() + 10
    while q.waiting("m") < expected:
        assert time.monotonic() < deadline, f"{count} requests never queued"
        await asyncio.sleep(0.001)
    return tasks


async def test_unbounded_capacity_dispatches_at_once():
    q = queue(None)
    slots = [await q.enter("m", "a", 1) for _ in range(50)]
    assert q.in_flight("m") == 50
    for s in slots:
        q.release(s)
        q.release(s)  # idempotent
    assert q.in_flight("m") == 0


async def test_capacity_gates_dispatch_until_a_release():
    q = queue(1)
    first = await q.enter("m", "a", 1)
    (second,) = await queued(q, 1)
    assert not second.done() and q.waiting("m") == 1
    q.release(first)
    slot = await asyncio.wait_for(second, 1)
    assert q.in_flight("m") == 1 and q.waiting("m") == 0
    q.release(slot)


async def _order_of(q: AdmissionQueue, entries: list[tuple[str, int]]) -> list[str]:
    """Enqueue entries behind one held slot, then release one at a time and
    record which tenant got each slot."""
    blocker = await q.enter("m", "blocker", 1)
    order: list[str] = []

    async def one(tenant: str, tier: int) -> None:
        slot = await q.enter("m", tenant, tier)
        order.append(tenant)
        await asyncio.sleep(0)
        q.release(slot)

    tasks = []
    for tenant, tier in entries:
        tasks.append(asyncio.create_task(one(tenant, tier)))
        await asyncio.sleep(0)  # enqueue in this order
    await asyncio.sleep(0.02)
    q.release(blocker)
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    return order


async def test_a_flooding_tenant_takes_turns_with_a_quiet_one():
    order = await _order_of(queue(1), [("flood", 1)] * 10 + [("quiet", 1)])
    assert order.index("quiet") == 1  # served right after flood's first, not after all ten


async def test_higher_tier_band_is_served_first():
    order = await _order_of(queue(1), [("low", 1)] * 3 + [("high", 2)] * 2)
    assert order[:2] == ["high", "high"]


async def test_full_queue_is_rejected_with_retry_after():
    q = queue(1, max_queue=2, full_status=503)
    held = await q.enter("m", "a", 1)
    waiting = await queued(q, 2)
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "a", 1)  # the same tenant: nobody to push out
    assert exc.value.status == 503 and exc.value.code == "queue_full"
    assert exc.value.retry_after and exc.value.retry_after >= 1
    q.release(held)
    for t in waiting:
        q.release(await t)


async def test_waiting_past_the_deadline_is_503_and_leaves_no_trace():
    q = queue(1, max_wait_s=0.1)
    held = await q.enter("m", "a", 1)
    t0 = time.monotonic()
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "a", 1)
    assert exc.value.status == 503 and exc.value.code == "queue_timeout"
    # Not before the limit; the ceiling is generous for a loaded machine (a limit read in
    # the wrong unit would be off by a thousand times).
    assert 0.09 <= time.monotonic() - t0 < 5
    assert q.waiting("m") == 0
    q.release(held)
    assert q.in_flight("m") == 0


async def test_request_deadline_shorter_than_queue_wait_wins():
    q = queue(1, max_wait_s=10)
    held = await q.enter("m", "a", 1)
    t0 = time.monotonic()
    with pytest.raises(GatewayError) as exc:
        await q.enter("m", "a", 1, deadline=time.monotonic() + 0.05)
    # The client's deadline, not the queue's limit: 504 (no Retry-After), long before
    # the 10 s wait a deadline ignored would take (the bound is loose for a loaded machine).
    assert exc.value.status == 504 and exc.value.code == "deadline_exceeded" and exc.value.retry_after is None
    assert 0.05 <= time.monotonic() - t0 < 5
    assert q.waiting("m") == 0
    q.release(held)


async def test_a_client_that_leaves_is_dropped_at_once():
    q = queue(1)
    held = await q.enter("m", "a", 1)
    gone = asyncio.Event()

    async def client_gone() -> bool:
        return gone.is_set()

    (task,) = await queued(q, 1, client_gone=client_gone)
    gone.set()
    with pytest.raises(ClientGoneWhileQueued):
        await asyncio.wait_for(task, 0.5)
    assert q.waiting("m") == 0
    q.release(held)
    assert q.in_flight("m") == 0


async def test_cancelling_a_queued_task_removes_it():
    q = queue(1)
    held = await q.enter("m", "a", 1)
    (task,) = await queued(q, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert q.waiting("m") == 0
    q.release(held)
    assert q.in_flight("m") == 0


async def test_capacity_that_rises_without_a_release_dispatches_waiters():
    cap = {"m": 0}  # saturated runtime
    q = AdmissionQueue(max_queue=10, max_wait_s=5, capacity=lambda m: cap[m], poll_s=0.01)
    task = asyncio.create_task(q.enter("m", "a", 1))
    await asyncio.sleep(0.03)
    assert not task.done()
    cap["m"] = 1
    q.release(await asyncio.wait_for(task, 1))


async def test_retry_after_follows_the_drain_rate():
    q = queue(1, max_queue=50, max_wait_s=100)
    for _ in range(10):  # ten completions in about 0.1 s: ~100/s
        q.release(await q.enter("m", "a", 1))
        await asyncio.sleep(0.01)
    held = await q.enter("m", "a", 1)
    waiting = [asyncio.create_task(q.enter("m", "a", 1)) for _ in range(20)]
    await asyncio.sleep(0.01)
    fast = q.drain_retry_after("m")
    await asyncio.sleep(0.5)  # nothing completes: the estimated rate falls
    slow = q.drain_retry_after("m")
    assert slow > fast
    for t in waiting:
        t.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    q.release(held)


async def test_a_flood_that_fills_the_queue_is_pushed_out_for_a_quiet_tenant():
    q = queue(1, max_queue=4, full_status=429)
    held = await q.enter("m", "flood", 1)
    flood = await queued(q, 4, "flood")
    quiet = [asyncio.create_task(q.enter("m", "quiet", 1)) for _ in range(2)]
    await asyncio.sleep(0.02)
    # Each quiet arrival pushed out the flood's newest: 2 places each now.
    for pushed_out in flood[2:]:
        with pytest.raises(GatewayError) as exc:
            await pushed_out
        assert exc.value.status == 429 and exc.value.code == "queue_full"
    assert q.waiting("m") == 4
    with pytest.raises(GatewayError):
        await q.enter("m", "quiet", 1)  # 2 against 2: the queue is full for everyone
    q.release(held)
    pending = set(flood[:2] + quiet)
    while pending:
        done, pending = await asyncio.wait(pending, timeout=2, return_when=asyncio.FIRST_COMPLETED)
        assert done, "a queued request was never dispatched"
        for t in done:
            q.release(t.result())
    assert q.in_flight("m") == 0 and q.waiting("m") == 0


async def test_a_lower_tier_never_pushes_out_a_higher_one():
    q = queue(1, max_queue=2)
    held = await q.enter("m", "vip", 2)
    vips = await queued(q, 2, "vip", 2)
    with pytest.raises(GatewayError):
        await q.enter("m", "low", 1)
    q.release(held)
    for t in vips:
        q.release(await asyncio.wait_for(t, 1))


def test_capacity_is_the_sum_of_max_inflight_when_nothing_is_saturated():
    from adapters.base import LoadSnapshot
    from policies.admission import BackendLoad, model_capacity

    calm = LoadSnapshot(waiting=0, kv_usage=0.3)
    assert model_capacity([BackendLoad(4, 1, calm), BackendLoad(8, 0, None)]) == 12
    assert model_capacity([BackendLoad(4, 1, calm), BackendLoad(None, 0, None)]) is None


def test_a_saturated_backend_takes_nothing_new():
    from adapters.base import LoadSnapshot
    from policies.admission import BackendLoad, model_capacity

    full_kv = LoadSnapshot(waiting=0, kv_usage=0.85)
    long_queue = LoadSnapshot(waiting=7, kv_usage=0.1)
    assert model_capacity([BackendLoad(4, 3, full_kv), BackendLoad(8, 2, None)]) == 3 + 8
    assert model_capacity([BackendLoad(None, 5, long_queue)]) == 5
    stale = LoadSnapshot(waiting=50, kv_usage=0.99, read_at=time.time() - 60)
    assert model_capacity([BackendLoad(4, 4, stale)]) == 4  # stale signals: fall back to max_inflight
    assert model_capacity([BackendLoad(4, 0, stale)]) == 4


def test_capacity_uses_the_detector_it_is_given():
    from adapters.base import LoadSnapshot
    from policies.admission import BackendLoad, model_capacity
    from policies.saturation import SaturationDetector

    three_waiting = LoadSnapshot(waiting=3, kv_usage=0.1)
    assert model_capacity([BackendLoad(4, 1, three_waiting)]) == 4
    assert model_capacity([BackendLoad(4, 1, three_waiting)], SaturationDetector(queue_depth=3)) == 1


@pytest.mark.parametrize(
    ("waiting", "kv_usage", "age_s"),
    [(4, 0.79, 0), (5, 0.1, 0), (0, 0.8, 0), (50, 0.99, 60), (None, None, 0)],
)
def test_admission_and_routing_agree_on_the_same_snapshot(waiting, kv_usage, age_s):
    from adapters.base import GenerationRequest, LoadSnapshot
    from policies.admission import BackendLoad, model_capacity
    from policies.profiles import PROFILES
    from policies.routing import route
    from policies.saturation import SaturationDetector
    from policies.views import BackendView

    detector = SaturationDetector()
    now = time.time()
    snap = LoadSnapshot(waiting=waiting, kv_usage=kv_usage, read_at=now - age_s)
    held_back = model_capacity([BackendLoad(4, 2, snap)], detector, now) == 2  # takes nothing new
    req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
    routed = route(
        PROFILES["round_robin"], [BackendView("x", inflight=2, max_inflight=4, load=snap), BackendView("y")], req
    )
    routed_last = [b.name for b in routed.candidates] == ["y", "x"]
    assert held_back == routed_last
    assert held_back == (age_s == 0 and ((waiting or 0) >= 5 or (kv_usage or 0) >= 0.8))
