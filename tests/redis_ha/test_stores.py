"""The quota store and the response store on a real Redis Cluster and a real
Sentinel set (one test body, both deployments): limits exact across two clients
(as two gateway replicas), every script of a tenant on one slot, scripts that a
server lost run again, a lost lease re-created by the heartbeat, and the
response store's round trip."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.openai.responses.store import ResponseNotFound, StoredResponse
from gateway.openai.responses.store_redis import RedisResponseStore
from policies.quota import QuotaExceeded, Reservation, ScopeLimits
from stores.quota_redis import RESERVE_LUA, RedisQuotaStore
from stores.redis_connect import RedisTarget, hash_tag
from tests.redis_ha.conftest import cluster_target, sentinel_target
from tests.redis_ha.deployments import ClusterDeployment, SentinelDeployment, cli

pytestmark = pytest.mark.redis_ha

TTL_MS = 30_000
# Each call's limit (a store's default is 1 s): nothing here meets an outage, and on a
# loaded 2-core machine 200 calls at once wait longer than that for a connection (behind
# Sentinel each new one first asks a sentinel where the master is).
CALL_TIMEOUT_S = 10.0


@pytest.fixture(params=["cluster", "sentinel"])
def deployment(request) -> ClusterDeployment | SentinelDeployment:
    return request.getfixturevalue(request.param)


def target_of(deployment: ClusterDeployment | SentinelDeployment) -> RedisTarget:
    if isinstance(deployment, ClusterDeployment):
        return cluster_target(deployment)
    return sentinel_target(deployment)


def master_for(deployment: ClusterDeployment | SentinelDeployment, key: str) -> int:
    if isinstance(deployment, ClusterDeployment):
        return deployment.master_of(key)
    return deployment.master()


@pytest.fixture
async def stores(deployment):
    """Two quota stores sharing one prefix: two gateway replicas."""
    prefix = f"p{uuid.uuid4().hex[:8]}"
    made = [RedisQuotaStore(target_of(deployment), key_prefix=prefix, timeout_s=CALL_TIMEOUT_S) for _ in range(2)]
    yield made
    for store in made:
        await store.aclose()


def lid() -> str:
    return uuid.uuid4().hex


async def test_a_60_per_minute_tenant_admits_exactly_60_of_200_from_two_replicas(stores):
    scopes = (ScopeLimits("t", requests_per_window=60),)

    async def attempt(i: int) -> bool:
        try:
            await stores[i % 2].reserve("acme", scopes, 0, lid(), TTL_MS)
        except QuotaExceeded:
            return False
        return True

    admitted = await asyncio.gather(*(attempt(i) for i in range(200)))
    assert sum(admitted) == 60


async def test_concurrency_is_never_exceeded_from_two_replicas(stores):
    scopes = (ScopeLimits("t", max_concurrent=5),)
    held: list[Reservation] = []

    async def attempt(i: int) -> None:
        try:
            held.append(await stores[i % 2].reserve("acme", scopes, 0, lid(), TTL_MS, units=1 + i % 2))
        except QuotaExceeded:
            pass

    await asyncio.gather(*(attempt(i) for i in range(60)))
    assert sum(r.units for r in held) == await stores[0].concurrent("acme", "t")
    assert 4 <= sum(r.units for r in held) <= 5  # full: no request of either size fits any more
    await stores[1].release(held.pop(), used_tokens=0)
    await asyncio.gather(*(attempt(i) for i in range(20)))
    assert sum(r.units for r in held) <= 5


async def test_every_script_of_a_tenant_touches_keys_of_one_slot(cluster):
    store = RedisQuotaStore(cluster_target(cluster), key_prefix="sl{o}t", timeout_s=CALL_TIMEOUT_S)
    responses = RedisResponseStore(cluster_target(cluster), key_prefix="sl{o}t", timeout_s=CALL_TIMEOUT_S)
    tenant = "ac{me}:x"
    try:
        keys = store.keys(tenant, "t") + store.keys(tenant, "k:one") + store.keys(tenant, "k:two")
        keys += responses.keys(tenant, "resp_1")
        assert len({cluster.keyslot(k) for k in keys}) == 1, keys
        # The scripts run on the cluster (a key outside the slot would be refused with CROSSSLOT).
        scopes = (ScopeLimits("t", 10, 1000, 5), ScopeLimits("k:one", 5), ScopeLimits("k:two", 5))
        held = await store.reserve(tenant, scopes, 10, lid(), TTL_MS, units=2)
        elsewhere = await store.reserve("other", (ScopeLimits("t", max_concurrent=5),), 0, lid(), TTL_MS)
        assert cluster.keyslot(store.keys("other", "t")[2]) != cluster.keyslot(keys[0])
        await store.heartbeat([held, elsewhere], TTL_MS)  # one script per tenant, each on its slot
        assert await store.concurrent(tenant, "k:two") == 2
        assert await store.concurrent("other", "t") == 1
        await store.release(held, used_tokens=4)
        assert await store.concurrent(tenant, "t") == 0
        # The response store's scripts too (a put evicts by key names it builds: same tag).
        responses.tenant_max_entries = 1
        for rid in ("resp_1", "resp_2"):
            await responses.put(tenant, StoredResponse({"id": rid, "output": []}, []))
        await responses.delete(tenant, "resp_2")
        with pytest.raises(ResponseNotFound):
            await responses.get(tenant, "resp_1")
        # Another tenant's keys carry their own tag (so tenants spread over the cluster).
        assert store.keys("other", "t")[0].startswith(hash_tag("sl{o}t", "other") + ":")
    finally:
        await store.aclose()
        await responses.aclose()


async def test_scripts_run_again_on_a_server_that_lost_them(deployment, stores):
    store = stores[0]
    scopes = (ScopeLimits("t", requests_per_window=10),)
    await store.reserve("acme", scopes, 0, lid(), TTL_MS)
    master = master_for(deployment, store.keys("acme", "t")[0])
    assert cli(master, "SCRIPT", "FLUSH") == "OK"  # what a restarted or new master looks like
    held = await store.reserve("acme", scopes, 0, lid(), TTL_MS)  # NOSCRIPT, then EVAL
    assert held.states[0].requests_remaining == 8
    assert cli(master, "SCRIPT", "EXISTS", RESERVE_LUA.sha) == "1"  # cached again: EVALSHA from now on


async def test_the_heartbeat_recreates_a_lease_the_store_lost(deployment, stores):
    store = stores[0]
    scopes = (ScopeLimits("t", max_concurrent=3),)
    held = await store.reserve("acme", scopes, 0, lid(), TTL_MS, units=2)
    lease_key = store.keys("acme", "t")[2]
    assert cli(master_for(deployment, lease_key), "DEL", lease_key) == "1"
    assert await stores[1].concurrent("acme", "t") == 0  # another replica would admit 3 more now
    await store.heartbeat([held], TTL_MS)
    assert await stores[1].concurrent("acme", "t") == 2
    assert store.leases_recreated == 2
    with pytest.raises(QuotaExceeded):
        await stores[1].reserve("acme", scopes, 0, lid(), TTL_MS, units=2)
    await store.heartbeat([held], TTL_MS)
    assert store.leases_recreated == 2  # a refresh of a present lease re-creates nothing


async def test_the_response_store_round_trip(deployment):
    store = RedisResponseStore(target_of(deployment), key_prefix=f"r{uuid.uuid4().hex[:6]}", timeout_s=CALL_TIMEOUT_S)
    record = StoredResponse({"id": "resp_1", "output": []}, [{"role": "user", "content": "hi"}])
    try:
        await store.put("acme", record)
        assert await store.get("acme", "resp_1") == record
        with pytest.raises(ResponseNotFound):
            await store.get("other", "resp_1")
        key = store.key("acme", "resp_1")
        assert cli(master_for(deployment, key), "EXISTS", key) == "1"
        await store.delete("acme", "resp_1")
        with pytest.raises(ResponseNotFound):
            await store.get("acme", "resp_1")
    finally:
        await store.aclose()


async def test_the_probe_passes_on_a_deployment_that_takes_writes(deployment, stores):
    await stores[0].ping()
