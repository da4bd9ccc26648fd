"""What a mutation run of stores/quota_redis.py left open, on one real redis-server: a
refusal's scope, limit, what was asked and the limit's value, and every scope's state
with three scopes; a release's defaults (the request stays counted, the tokens are
reconciled even after the lease expired) and every scope's keys; the heartbeat
re-creating the leases a server lost, counted and logged once."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from policies.quota import UNLIMITED, QuotaExceeded, ScopeLimits
from stores.quota_redis import RedisQuotaStore
from stores.redis_connect import hash_tag

TTL_MS = 60_000


@pytest.fixture
async def store(redis_server):
    s = RedisQuotaStore(redis_server.url, key_prefix="t", window_ms=60_000, bucket_ms=100)
    yield s
    await s.aclose()


def lid() -> str:
    return uuid.uuid4().hex


async def test_a_refusal_names_its_scope_its_limit_what_was_asked_and_every_scopes_state(store):
    scopes = (
        ScopeLimits("a", requests_per_window=100, tokens_per_window=1000),
        ScopeLimits("b", requests_per_window=2, tokens_per_window=1000),
        ScopeLimits("c", requests_per_window=100, tokens_per_window=50, max_concurrent=3),
    )
    r = await store.reserve("acme", scopes, 10, lid(), TTL_MS)
    assert [(s.scope, s.requests_remaining, s.tokens_remaining, s.concurrent) for s in r.states] == [
        ("a", 99, 990, 1),
        ("b", 1, 990, 1),
        ("c", 99, 40, 1),
    ]
    await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    with pytest.raises(QuotaExceeded) as info:
        await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    e = info.value
    assert (e.scope, e.limit, e.requested, e.limit_value) == ("b", "requests", 1, 2) and e.retry_after_s > 0
    assert [s.scope for s in e.states] == ["a", "b", "c"] and e.states[2].requests_remaining == 98


@pytest.mark.parametrize(("tokens", "waits"), [(45, True), (51, False)])
async def test_a_token_refusal_says_how_many_were_asked_against_the_limit(store, tokens, waits):
    scopes = (ScopeLimits("t", tokens_per_window=50),)
    await store.reserve("acme", scopes, 10, lid(), TTL_MS)
    with pytest.raises(QuotaExceeded) as info:
        await store.reserve("acme", scopes, tokens, lid(), TTL_MS)
    e = info.value
    assert (e.scope, e.limit, e.requested, e.limit_value) == ("t", "tokens", tokens, 50)
    # over the whole limit, waiting cannot help: no retry time
    assert (e.retry_after_s is not None and e.retry_after_s > 0) if waits else e.retry_after_s is None


async def test_a_concurrency_refusal_states_the_units_asked_and_the_limit(store):
    scopes = (ScopeLimits("t", max_concurrent=3),)
    await store.reserve("acme", scopes, 0, lid(), TTL_MS, units=2)
    with pytest.raises(QuotaExceeded) as info:
        await store.reserve("acme", scopes, 0, lid(), TTL_MS, units=2)
    e = info.value
    assert (e.limit, e.requested, e.limit_value, e.retry_after_s) == ("concurrency", 2, 3, 1.0)


async def test_a_release_by_default_keeps_the_request_counted_and_frees_every_scope(store):
    scopes = (ScopeLimits("a", requests_per_window=1, max_concurrent=5), ScopeLimits("b", max_concurrent=5))
    r = await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    await store.release(r, 0)
    assert [await store.concurrent("acme", s.name) for s in scopes] == [0, 0]
    with pytest.raises(QuotaExceeded) as info:  # the request still counts: no refund by default
        await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    assert info.value.limit == "requests"


async def test_a_first_release_reconciles_the_tokens_even_after_its_lease_expired(store):
    scopes = (ScopeLimits("t", tokens_per_window=100),)
    r = await store.reserve("acme", scopes, 80, lid(), 50)
    await asyncio.sleep(0.2)  # the lease is gone; a first release (not a replay) still runs
    await store.release(r, 20)
    again = await store.reserve("acme", scopes, 80, lid(), TTL_MS)
    assert again.states[0].tokens_remaining == 0


async def test_the_heartbeat_recreates_lost_leases_counts_and_logs_them_once(store, caplog):
    scopes = (ScopeLimits("t", max_concurrent=UNLIMITED),)
    held = [
        await store.reserve("acme", scopes, 0, lid(), TTL_MS, units=2),
        await store.reserve("beta", scopes, 0, lid(), TTL_MS),
    ]
    await store.heartbeat(held, TTL_MS)
    assert store.leases_recreated == 0
    for tenant in ("acme", "beta"):
        await store.redis.command("DEL", store.keys(tenant, "t")[2])  # what a failover can lose
    with caplog.at_level(logging.WARNING):
        await store.heartbeat(held, TTL_MS)
        await store.heartbeat(held, TTL_MS)
    assert store.leases_recreated == 3
    assert [await store.concurrent(t, "t") for t in ("acme", "beta")] == [2, 1]
    await store.redis.command("DEL", store.keys("beta", "t")[2])
    with caplog.at_level(logging.WARNING):
        await store.heartbeat(held, TTL_MS)
    assert store.leases_recreated == 4  # a running count
    lines = [r.getMessage() for r in caplog.records if "re-created" in r.getMessage()]
    assert lines == [f"re-created {n} lease(s) that {store.describe()} had lost (a failover?)" for n in (3, 1)]


def test_keys_carry_the_tenants_tag_under_the_switchyard_prefix_by_default():
    store = RedisQuotaStore("redis://127.0.0.1:9")  # never dialled
    tag = hash_tag("switchyard", "acme")
    assert store.keys("acme", "t") == [f"{tag}:t:rpm", f"{tag}:t:tpm", f"{tag}:t:lease"]
    assert store.leases_recreated == 0


@pytest.mark.parametrize(("window_ms", "bucket_ms", "refused"), [(1000, 300, True), (900, 300, False)])
def test_the_window_must_be_whole_buckets(window_ms, bucket_ms, refused):
    if refused:
        with pytest.raises(ValueError, match="^window_ms must be a multiple of bucket_ms$"):
            RedisQuotaStore("redis://127.0.0.1:9", window_ms=window_ms, bucket_ms=bucket_ms)
    else:
        assert RedisQuotaStore("redis://127.0.0.1:9", window_ms=window_ms, bucket_ms=bucket_ms).window_ms == 900
