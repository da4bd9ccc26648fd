"""The quota store on a real Redis Cluster, quickly: one reservation and its
release, on the master that serves the tenant's slot. The rest of this directory
(more stores, Sentinel, failovers) runs in `make test-redis-ha`."""

from __future__ import annotations

import pytest

from policies.quota import QuotaExceeded, ScopeLimits
from stores.quota_redis import RedisQuotaStore
from tests.redis_ha.conftest import cluster_target
from tests.redis_ha.deployments import cli


async def test_one_reservation_and_its_release_on_a_cluster(cluster):
    store = RedisQuotaStore(cluster_target(cluster), key_prefix="smoke")
    scopes = (ScopeLimits("t", requests_per_window=5, max_concurrent=1),)
    rpm_key, _, lease_key = store.keys("acme", "t")
    try:
        held = await store.reserve("acme", scopes, 10, "lease-1", 10_000)
        assert held.states[0].requests_remaining == 4
        with pytest.raises(QuotaExceeded) as refused:
            await store.reserve("acme", scopes, 10, "lease-2", 10_000)
        assert refused.value.limit == "concurrency"
        master = cluster.master_of(rpm_key)
        assert cli(master, "ZRANGE", lease_key, "0", "-1") == "lease-1"
        await store.release(held, used_tokens=10)
        assert await store.concurrent("acme", "t") == 0
        assert cli(master, "ZCARD", lease_key) == "0"
        assert cli(master, "HVALS", rpm_key) == "1"  # the request still counts
    finally:
        await store.aclose()
