"""Every error Redis can answer takes the quota store's one failure path, with a
real redis-server made to answer each: out of memory (`maxmemory` below what it
holds), read-only (demoted to a replica with `REPLICAOF`), hung (`DEBUG SLEEP`),
busy in another client's script (BUSY), scripts lost (`SCRIPT FLUSH`), a key of
the wrong type. The path: the store is
marked down (`switchyard_quota_store_up` 0), the fail policy applies, a release
that could not be sent waits and is sent once it answers, never twice, and no
exception reaches the request. The tenant here may run one request at a time,
so a lease left behind shows as a 429 once Redis is used again.

Bounds wait on state and are generous on purpose (a loaded 2-core machine): the
probe retries at least every 0.5 s (policies/quota_health.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis

from adapters.base import Usage
from gateway.protection.gate import Protection
from policies.quota import UNLIMITED, QuotaStoreUnavailable, ScopeLimits
from stores.quota_redis import RedisQuotaStore
from tests.gateway.protection_kit import config, make, never_gone, principal, request, sample

TIMEOUT_S = 0.3  # the quota store's call timeout here: a hung Redis costs this, not 1 s
RECOVERY_BOUND_S = 10.0  # probe delay (<= 0.5 s) plus ample room for a loaded machine
UP = "switchyard_quota_store_up"
PENDING = "switchyard_quota_pending_releases"
DOWN = "switchyard_quota_store_transitions_total"


async def started(redis_url: str, policy: str = "fail_open") -> Protection:
    store = {"kind": "redis", "url": redis_url, "on_unavailable": policy, "timeout_s": TIMEOUT_S, "lease_ttl_s": 60}
    return await make(config(store, max_concurrent=1))


@asynccontextmanager
async def admin(url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(url)
    try:
        yield client
    finally:
        await client.aclose()


async def one_at_a_time(p: Protection, count: int) -> set[str]:
    """`count` requests of tenant a, each released before the next: where each was admitted."""
    who = await principal(p)
    where = set()
    for _ in range(count):
        ticket = await p.admit(who, "m", request(), 1, never_gone)
        assert ticket.reservation is not None
        where.add(ticket.reservation.store)
        await ticket.release(Usage(1, 3))
    return where


async def settled(p: Protection) -> None:
    """Redis used again, everything kept for it sent, and no lease of tenant a left in it."""
    deadline = time.monotonic() + RECOVERY_BOUND_S
    while not (p.leases.health.up and not p.leases.pending and await p.leases.store.concurrent("a", "t") == 0):
        assert time.monotonic() < deadline, "Redis not used again, or a lease left in it"
        await asyncio.sleep(0.05)


async def test_a_full_redis_is_a_store_outage_and_leaks_no_lease(redis_server):
    """Finding 3: at maxmemory the reserve went on (its first write frees, so Redis
    let it fill the server) while every release failed with OutOfMemoryError, the
    exception escaped, the lease stayed and the tenant got 429 ever after. Now a
    full Redis refuses the reserve (store down, the fail policy) and still takes
    the release."""
    p = await started(redis_server.url)
    who = await principal(p)
    try:
        async with admin(redis_server.url) as r:
            held = await p.admit(who, "m", request(), 1, never_gone)
            assert held.reservation is not None and held.reservation.store == "redis"
            await r.set("filler", b"x" * (2 << 20))
            await r.config_set("maxmemory", "1mb")
            await held.release(Usage(1, 3))  # frees: taken even by a full Redis
            assert await p.leases.store.concurrent("a", "t") == 0
            assert await one_at_a_time(p, 3) == {"local-fallback"}  # the fail policy, never 429
            assert sample(p, UP) == 0
            await asyncio.sleep(1.0)  # the probe asks twice or more meanwhile: still full, still down
            assert sample(p, UP) == 0 and sample(p, DOWN, {"to": "down"}) == 1
            assert await one_at_a_time(p, 3) == {"local-fallback"}
            await r.config_set("maxmemory", "0")
            await settled(p)
            assert await one_at_a_time(p, 20) == {"redis"}
            assert sample(p, UP) == 1
    finally:
        await p.aclose()


async def test_a_full_redis_with_fail_closed_refuses_with_the_policy_error(redis_server):
    p = await started(redis_server.url, "fail_closed")
    who = await principal(p)
    try:
        async with admin(redis_server.url) as r:
            await r.set("filler", b"x" * (2 << 20))
            await r.config_set("maxmemory", "1mb")
            for _ in range(3):
                try:
                    await p.admit(who, "m", request(), 1, never_gone)
                except Exception as exc:  # noqa: BLE001  (the type is the assertion)
                    assert getattr(exc, "code", None) == "quota_store_unavailable", repr(exc)
                    assert "OOM" not in str(exc) and "maxmemory" not in str(exc)
                else:
                    raise AssertionError("admitted on a full Redis with fail_closed")
            assert sample(p, UP) == 0
            await r.config_set("maxmemory", "0")
            await settled(p)
            assert await one_at_a_time(p, 5) == {"redis"}
    finally:
        await p.aclose()


async def test_a_demoted_redis_is_a_store_outage(redis_server):
    """READONLY: the server became a replica (a failover demoted it)."""
    p = await started(redis_server.url)
    who = await principal(p)
    try:
        async with admin(redis_server.url) as r:
            held = await p.admit(who, "m", request(), 1, never_gone)
            await r.execute_command("REPLICAOF", "127.0.0.1", "1")  # a master that never answers
            await held.release(Usage(1, 3))
            assert sample(p, UP) == 0
            assert await one_at_a_time(p, 3) == {"local-fallback"}
            await r.execute_command("REPLICAOF", "NO", "ONE")
            await settled(p)
            assert await one_at_a_time(p, 10) == {"redis"}
    finally:
        await p.aclose()


async def test_a_hung_redis_runs_a_timed_out_release_once(redis_server):
    """DEBUG SLEEP: the release times out, is kept, and the server runs it when it
    wakes; sending it again must not give the tokens back a second time."""
    p = await started(redis_server.url)
    who = await principal(p)
    try:
        async with admin(redis_server.url) as r:
            held = await p.admit(who, "m", request(max_tokens=100), 1, never_gone)
            tpm_key = p.leases.store.keys("a", "t")[1]
            sleeper = asyncio.create_task(r.execute_command("DEBUG", "SLEEP", "1.5"))
            await asyncio.sleep(0.2)  # the server is asleep now
            await held.release(Usage(1, 3))  # times out: kept
            assert sample(p, UP) == 0 and sample(p, PENDING) == 1
            await sleeper
            await settled(p)
            charged = sum(int(v) for v in (await r.hgetall(tpm_key)).values())
            assert charged == 4, charged  # 101 reserved, 4 used: given back once, not clamped to 0 by a second time
            assert await one_at_a_time(p, 5) == {"redis"}
    finally:
        await p.aclose()


async def test_scripts_flushed_are_loaded_again_without_an_outage(redis_server):
    p = await started(redis_server.url)
    try:
        async with admin(redis_server.url) as r:
            assert await one_at_a_time(p, 2) == {"redis"}
            await r.script_flush()
            assert await one_at_a_time(p, 3) == {"redis"}
            assert sample(p, UP) == 1
    finally:
        await p.aclose()


async def test_a_script_error_is_a_store_outage_not_an_exception(redis_server):
    """Any error answer (here WRONGTYPE, a key clobbered by something else) takes the same path."""
    p = await started(redis_server.url)
    try:
        async with admin(redis_server.url) as r:
            lease_key = p.leases.store.keys("a", "t")[2]
            await r.set(lease_key, "not a sorted set")
            assert await one_at_a_time(p, 2) == {"local-fallback"}
            assert sample(p, UP) == 0
            await r.delete(lease_key)
            await settled(p)
            assert await one_at_a_time(p, 3) == {"redis"}
    finally:
        await p.aclose()


async def test_a_release_sent_again_after_a_lost_answer_runs_once(redis_server):
    """The answer of a release is lost in a hang (the server runs it when it wakes);
    the release is sent again as a replay: the tokens are given back once."""
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    scopes = (ScopeLimits("t", UNLIMITED, UNLIMITED, 2),)
    try:
        async with admin(redis_server.url) as r:
            held = await store.reserve("a", scopes, 101, "lease-1", 60_000)
            await store.concurrent("a", "t")  # the pooled connection is open: the release goes out on it
            sleeper = asyncio.create_task(r.execute_command("DEBUG", "SLEEP", "1"))
            await asyncio.sleep(0.2)
            with pytest.raises(QuotaStoreUnavailable):
                await store.release(held, 4)
            await sleeper
            await store.release(held, 4, replay=True)
            await store.release(held, 4, replay=True)  # and any number of times more
            charged = sum(int(v) for v in (await r.hgetall(store.keys("a", "t")[1])).values())
            assert charged == 4, charged
            assert await store.concurrent("a", "t") == 0
    finally:
        await store.aclose()


BUSY_LUA = """
local t = redis.call('TIME')
local start = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now = start
while now - start < tonumber(ARGV[1]) do
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
return 1
"""


async def test_a_redis_busy_in_a_script_is_a_store_outage(redis_server):
    """BUSY: another client's script runs past `busy-reply-threshold`; every other
    call is answered with an error until it ends."""
    p = await started(redis_server.url)
    try:
        async with admin(redis_server.url) as r, admin(redis_server.url) as busy:
            await r.config_set("busy-reply-threshold", "50")
            await busy.ping()
            running = asyncio.create_task(busy.eval(BUSY_LUA, 0, "1500"))
            await asyncio.sleep(0.3)  # past the threshold: Redis answers BUSY now
            assert await one_at_a_time(p, 3) == {"local-fallback"}
            assert sample(p, UP) == 0
            await running
            await settled(p)
            assert await one_at_a_time(p, 5) == {"redis"}
    finally:
        await p.aclose()
