"""Issue 12, defect 7, in process: a request holds one unit per generation.

The quota stores (memory and a real Redis) take one lease member per unit and
check the concurrency limit against all of them; the admission queue counts
units against the model's capacity; `Protection.admit(choices=)` holds that
many units of both.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from prometheus_client import CollectorRegistry

from adapters.base import GenerationRequest, SamplingParams
from adapters.errors import GatewayError
from gateway.config.schema import parse_config
from gateway.protection.gate import Protection
from policies.admission import AdmissionQueue
from policies.auth import hash_key
from policies.quota import QuotaExceeded, ScopeLimits
from stores.quota_memory import MemoryQuotaStore
from stores.quota_redis import RedisQuotaStore
from tests.procs import start_redis

TTL_MS = 10_000
SCOPE = (ScopeLimits("t", max_concurrent=4),)


@pytest.fixture(scope="module")
def redis_for_units(module_tmp):
    p = start_redis(module_tmp)
    yield p
    p.stop()


@pytest.fixture(params=["memory", "redis"])
async def store(request, redis_for_units):
    if request.param == "memory":
        yield MemoryQuotaStore()
        return
    s = RedisQuotaStore(redis_for_units.url, key_prefix=f"u{uuid.uuid4().hex[:8]}")
    yield s
    await s.aclose()


async def test_a_reservation_holds_one_lease_per_unit(store):
    held = await store.reserve("acme", SCOPE, 0, uuid.uuid4().hex, TTL_MS, units=3)
    assert held.units == 3 and held.states[0].concurrent == 3
    assert await store.concurrent("acme", "t") == 3
    with pytest.raises(QuotaExceeded) as info:  # 3 + 2 > 4: wait for one to finish
        await store.reserve("acme", SCOPE, 0, uuid.uuid4().hex, TTL_MS, units=2)
    assert (info.value.limit, info.value.requested, info.value.retry_after_s) == ("concurrency", 2, 1.0)
    one = await store.reserve("acme", SCOPE, 0, uuid.uuid4().hex, TTL_MS)
    await store.heartbeat([held, one], TTL_MS)
    assert await store.concurrent("acme", "t") == 4
    await store.release(held, 0)
    await store.release(one, 0)
    assert await store.concurrent("acme", "t") == 0


async def test_more_units_than_the_limit_can_never_fit(store):
    with pytest.raises(QuotaExceeded) as info:
        await store.reserve("acme", SCOPE, 0, uuid.uuid4().hex, TTL_MS, units=5)
    assert (info.value.limit, info.value.requested, info.value.retry_after_s) == ("concurrency", 5, None)
    assert await store.concurrent("acme", "t") == 0


async def test_the_queue_counts_units_against_the_capacity():
    queue = AdmissionQueue(max_queue=10, max_wait_s=5, capacity=lambda model: 8, poll_s=0.01)
    big = await queue.enter("m", "a", 1, units=8)
    small = asyncio.create_task(queue.enter("m", "b", 1, units=1))
    await asyncio.sleep(0.05)
    assert not small.done() and queue.in_flight("m") == 8
    queue.release(big)
    slot = await asyncio.wait_for(small, 1)
    assert queue.in_flight("m") == 1
    queue.release(slot)
    assert queue.in_flight("m") == 0


async def test_a_request_larger_than_the_capacity_runs_alone_and_is_not_overtaken():
    queue = AdmissionQueue(max_queue=10, max_wait_s=5, capacity=lambda model: 4, poll_s=0.01)
    first = await queue.enter("m", "a", 1)
    huge = asyncio.create_task(queue.enter("m", "b", 1, units=6))
    await asyncio.sleep(0.02)
    later = asyncio.create_task(queue.enter("m", "c", 1))  # would fit beside `first`, but waits its turn
    await asyncio.sleep(0.05)
    assert not huge.done() and not later.done()
    queue.release(first)
    alone = await asyncio.wait_for(huge, 1)
    assert queue.in_flight("m") == 6 and not later.done()
    queue.release(alone)
    queue.release(await asyncio.wait_for(later, 1))
    assert queue.in_flight("m") == 0


KEY = "sk-sy-units-tenant-key"


async def test_admit_holds_the_requests_choices_in_the_lease_and_the_queue():
    cfg = {
        "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key(KEY), "tenant": "a"}]},
        "tenants": {"a": {"max_concurrent": 4}},
        "models": {"m": {"backends": [{"name": "b", "adapter": "openai", "url": "http://x/v1"}]}},
    }
    p = Protection(parse_config(cfg), CollectorRegistry())
    await p.start()
    who = await p.authenticate({"authorization": f"Bearer {KEY}"})
    req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(n=8))

    async def never_gone() -> bool:
        return False

    with pytest.raises(GatewayError) as info:
        await p.admit(who, "m", req, 1, never_gone, choices=8)
    assert (info.value.status, info.value.code, info.value.param) == (400, "request_exceeds_concurrency_limit", "n")
    assert info.value.retry_after is None  # no wait makes it fit: nothing invites a retry
    assert "8" in info.value.message and "4" in info.value.message
    ticket = await p.admit(who, "m", req, 1, never_gone, choices=3)
    assert p.snapshot()["in_flight"] == 3 and await p.leases.local.concurrent("a", "t") == 3
    with pytest.raises(GatewayError) as info:  # 3 + 2 > 4, and it would fit later
        await p.admit(who, "m", req, 1, never_gone, choices=2)
    assert info.value.retry_after is not None
    await ticket.release(None)
    assert p.snapshot()["in_flight"] == 0 and await p.leases.local.concurrent("a", "t") == 0
    await p.aclose()
