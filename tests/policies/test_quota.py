"""The quota stores' shared semantics, run against the memory store and a real
Redis (one test body, both stores)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from policies.quota import (
    UNLIMITED,
    QuotaExceeded,
    ScopeLimits,
    format_reset,
    ratelimit_headers,
    token_budget,
)
from stores.quota_memory import MemoryQuotaStore
from stores.quota_redis import RedisQuotaStore

# A minute: the reservations of one test land in one window whatever the machine's load
# (a 1 s window slid under a 200-reservation burst on a loaded machine and admitted more
# than the limit, as a sliding window should). The test of the slide itself uses SLIDE_MS.
WINDOW_MS = 60_000
SLIDE_MS = 1000
BUCKET_MS = 100
TTL_MS = 10_000

StoreFactory = Callable[..., object]


@pytest.fixture(params=["memory", "redis"])
async def make_store(request, shared_redis) -> AsyncIterator[StoreFactory]:
    """Builds stores sharing one state: for Redis, several clients (as several
    replicas would be); for memory, the same instance."""
    made: list = []
    prefix = f"t{uuid.uuid4().hex[:8]}"
    memory: dict[int, MemoryQuotaStore] = {}

    def factory(window_ms: int = WINDOW_MS):
        if request.param == "memory":
            return memory.setdefault(window_ms, MemoryQuotaStore(window_ms=window_ms, bucket_ms=BUCKET_MS))
        # Generous connection timeouts: these tests judge the limits, and a loaded machine
        # took over a second to connect a burst's connections (the store's 1 s default).
        store = RedisQuotaStore(
            shared_redis.url,
            key_prefix=f"{prefix}w{window_ms}",
            window_ms=window_ms,
            bucket_ms=BUCKET_MS,
            timeout_s=30,
            pool_wait_s=30,
        )
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.aclose()


def lid() -> str:
    return uuid.uuid4().hex


async def refused_after(store, scopes: tuple[ScopeLimits, ...], admitted: int) -> QuotaExceeded:
    """`admitted` requests taken, then the refusal of one more (fails if it is taken)."""
    for _ in range(admitted):
        await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    return exc.value


async def test_requests_limit_rejects_the_next_and_says_when_to_retry(make_store):
    refused = await refused_after(make_store(), (ScopeLimits("t", requests_per_window=5),), 5)
    assert refused.limit == "requests"
    assert 0 < refused.retry_after_s <= WINDOW_MS / 1000
    assert refused.states[0].requests_remaining == 0


async def test_window_slides_and_retry_after_is_honest(make_store):
    store = make_store(SLIDE_MS)
    scopes = (ScopeLimits("t", requests_per_window=3),)
    refused = await refused_after(store, scopes, 3)
    assert 0 < refused.retry_after_s <= SLIDE_MS / 1000
    await asyncio.sleep(refused.retry_after_s + 0.02)
    await store.reserve("acme", scopes, 0, lid(), TTL_MS)


async def test_tokens_are_reserved_then_reconciled_down_to_real_usage(make_store):
    store = make_store()
    scopes = (ScopeLimits("t", tokens_per_window=1000),)
    r = await store.reserve("acme", scopes, 600, lid(), TTL_MS)
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("acme", scopes, 500, lid(), TTL_MS)
    assert exc.value.limit == "tokens"
    await store.release(r, used_tokens=100)
    r2 = await store.reserve("acme", scopes, 900, lid(), TTL_MS)
    assert r2.states[0].tokens_remaining == 0


async def test_usage_beyond_the_reservation_is_charged(make_store):
    store = make_store()
    scopes = (ScopeLimits("t", tokens_per_window=1000),)
    r = await store.reserve("acme", scopes, 100, lid(), TTL_MS)
    await store.release(r, used_tokens=700)
    with pytest.raises(QuotaExceeded):
        await store.reserve("acme", scopes, 301, lid(), TTL_MS)
    r2 = await store.reserve("acme", scopes, 300, lid(), TTL_MS)
    assert r2.states[0].tokens_remaining == 0


async def test_a_request_larger_than_the_whole_limit_gets_no_retry_after(make_store):
    store = make_store()
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("acme", (ScopeLimits("t", tokens_per_window=100),), 101, lid(), TTL_MS)
    assert exc.value.retry_after_s is None


async def test_reset_times_say_when_the_same_request_fits_again(make_store):
    store = make_store()
    scopes = (ScopeLimits("t", requests_per_window=3, tokens_per_window=1000),)
    first = await store.reserve("acme", scopes, 400, lid(), TTL_MS)
    assert first.states[0].requests_reset_ms == 0  # two more requests fit now
    assert first.states[0].tokens_reset_ms == 0  # another 400 tokens fit now
    second = await store.reserve("acme", scopes, 400, lid(), TTL_MS)
    # 800 of 1000 used: another 400 fits only once the first leaves the window
    assert 0 < second.states[0].tokens_reset_ms <= WINDOW_MS
    assert second.states[0].requests_reset_ms == 0
    third = await store.reserve("acme", scopes, 100, lid(), TTL_MS)
    assert 0 < third.states[0].requests_reset_ms <= WINDOW_MS  # 3 of 3 requests used
    assert third.states[0].tokens_reset_ms == 0  # 900 used: another 100 fits
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("acme", scopes, 100, lid(), TTL_MS)
    # the refusal's reset is its Retry-After: the limiter's one answer
    assert exc.value.states[0].requests_reset_ms == pytest.approx(exc.value.retry_after_s * 1000)
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("acme", (ScopeLimits("t", tokens_per_window=1000),), 5000, lid(), TTL_MS)
    # a request over the whole limit: the reset is when the window is empty
    assert exc.value.retry_after_s is None
    assert 0 < exc.value.states[0].tokens_reset_ms <= WINDOW_MS


async def test_concurrency_lease_is_freed_by_release(make_store):
    store = make_store()
    scopes = (ScopeLimits("t", max_concurrent=2),)
    a = await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    assert exc.value.limit == "concurrency"
    await store.release(a, used_tokens=0)
    assert await store.concurrent("acme", "t") == 1
    await store.reserve("acme", scopes, 0, lid(), TTL_MS)


async def test_unreleased_lease_expires_after_ttl_unless_refreshed(make_store):
    store = make_store()
    scopes = (ScopeLimits("t", max_concurrent=2),)
    # A 1 s TTL refreshed every 0.25 s: a stall of up to 0.75 s on a loaded machine
    # still finds the kept lease alive (0.3 s refreshed every 0.15 s left 0.15 s).
    kept = await store.reserve("acme", scopes, 0, lid(), 1000)
    await store.reserve("acme", scopes, 0, lid(), 1000)  # its holder "crashes"
    for _ in range(5):
        await asyncio.sleep(0.25)
        await store.heartbeat([kept], 1000)
    assert await store.concurrent("acme", "t") == 1


async def test_a_key_scope_rejection_takes_nothing_from_the_tenant(make_store):
    store = make_store()
    tenant = ScopeLimits("t", requests_per_window=10, tokens_per_window=1000)
    key = ScopeLimits("k:a", requests_per_window=1)
    await store.reserve("acme", (tenant, key), 10, lid(), TTL_MS)
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("acme", (tenant, key), 10, lid(), TTL_MS)
    assert exc.value.scope == "k:a"
    other_key = ScopeLimits("k:b", requests_per_window=5)
    r = await store.reserve("acme", (tenant, other_key), 10, lid(), TTL_MS)
    assert r.states[0].requests_remaining == 8
    assert r.states[0].tokens_remaining == 980


async def test_refund_request_uncounts_it(make_store):
    store = make_store()
    scopes = (ScopeLimits("t", requests_per_window=1, tokens_per_window=100),)
    r = await store.reserve("acme", scopes, 50, lid(), TTL_MS)
    await store.release(r, used_tokens=0, refund_request=True)
    r2 = await store.reserve("acme", scopes, 100, lid(), TTL_MS)
    assert r2.states[0].requests_remaining == 0


async def test_tenants_do_not_share_limits(make_store):
    store = make_store()
    scopes = (ScopeLimits("t", requests_per_window=1),)
    await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    await store.reserve("globex", scopes, 0, lid(), TTL_MS)


async def test_concurrent_reservations_from_many_clients_never_overshoot(make_store):
    stores = [make_store() for _ in range(3)]  # three "replicas"
    scopes = (ScopeLimits("t", requests_per_window=37, tokens_per_window=5000, max_concurrent=UNLIMITED),)

    async def one(i: int) -> int:
        try:
            r = await stores[i % 3].reserve("acme", scopes, 97, lid(), TTL_MS)
            return r.tokens
        except QuotaExceeded:
            return 0

    taken = await asyncio.gather(*(one(i) for i in range(200)))
    admitted = [t for t in taken if t]
    # 5000 // 97 = 51 > 37: the request limit binds, exactly.
    assert len(admitted) == 37
    assert sum(admitted) <= 5000


async def test_concurrent_token_reservations_stop_exactly_at_the_limit(make_store):
    stores = [make_store() for _ in range(3)]
    scopes = (ScopeLimits("t", tokens_per_window=1000),)
    results = await asyncio.gather(
        *(stores[i % 3].reserve("acme", scopes, 30, lid(), TTL_MS) for i in range(100)), return_exceptions=True
    )
    admitted = [r for r in results if not isinstance(r, Exception)]
    assert len(admitted) == 1000 // 30
    assert all(isinstance(r, QuotaExceeded) for r in results if isinstance(r, Exception))


def test_headers_report_the_tightest_scope():
    from policies.quota import ScopeState

    states = [ScopeState("t", 100, 40, 2000, 1000, 900, 1500, 1), ScopeState("k:a", 50, 3, 59_000, UNLIMITED, 0, 0, 1)]
    h = ratelimit_headers(states)
    assert h["x-ratelimit-limit-requests"] == "50"
    assert h["x-ratelimit-remaining-requests"] == "3"
    assert h["x-ratelimit-reset-requests"] == "59s"
    assert h["x-ratelimit-limit-tokens"] == "1000"
    assert h["x-ratelimit-remaining-tokens"] == "900"
    assert h["x-ratelimit-reset-tokens"] == "2s"


def test_reset_format_matches_openai():
    assert format_reset(20) == "20ms"
    assert format_reset(1000) == "1s"
    assert format_reset(360_000) == "6m0s"
    assert format_reset(0) == "0s"


def test_reservation_counts_every_choice():
    assert token_budget(10, 100, 3, cap=50).total == 310
    assert token_budget(10, None, 1, cap=50).total == 60
    assert token_budget(10, None, 1, cap=50).from_cap and not token_budget(10, 100, 3, cap=50).from_cap


async def test_redis_keys_of_one_tenant_share_one_cluster_slot(shared_redis):
    store = RedisQuotaStore(shared_redis.url, key_prefix="p")
    keys = store.keys("ac{me}", "t") + store.keys("ac{me}", "k:x")
    tags = {re.match(r"^\{([^}]*)\}", k).group(1) for k in keys}
    assert tags == {"p:ac%7Bme%7D"}
    await store.aclose()


async def test_redis_down_raises_unavailable(private_redis):
    from policies.quota import QuotaStoreUnavailable

    store = RedisQuotaStore(private_redis.url, key_prefix="p", timeout_s=0.3)
    await store.reserve("acme", (ScopeLimits("t"),), 1, lid(), TTL_MS)
    private_redis.stop()
    with pytest.raises(QuotaStoreUnavailable):
        await store.reserve("acme", (ScopeLimits("t"),), 1, lid(), TTL_MS)
    await store.aclose()


async def test_a_read_only_replica_is_unavailable_not_an_error(private_redis):
    from policies.quota import QuotaStoreUnavailable
    from processes import free_port

    store = RedisQuotaStore(private_redis.url, key_prefix="p", timeout_s=0.3)
    await store.redis.client.execute_command("REPLICAOF", "127.0.0.1", str(free_port()))  # demoted, as in a failover
    with pytest.raises(QuotaStoreUnavailable):
        await store.reserve("acme", (ScopeLimits("t"),), 1, lid(), TTL_MS)
    await store.aclose()
