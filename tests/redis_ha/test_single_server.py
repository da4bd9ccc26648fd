"""What the stores share with every Redis deployment, checked on one real
redis-server: a master that refuses writes for lack of replicas, or that was
demoted to a replica, is unavailable (and so is the probe, so shared limits do
not come back on it); a password from a file logs in; logs never show one."""

from __future__ import annotations

import pytest

from policies.quota import QuotaStoreUnavailable, ScopeLimits
from processes import free_port
from stores.quota_redis import RedisQuotaStore
from stores.redis_connect import RedisTarget
from tests.procs import Process
from tests.redis_ha.deployments import cli

SCOPES = (ScopeLimits("t", requests_per_window=10),)


def port_of(redis: Process) -> int:
    return int(redis.url.rsplit(":", 1)[1].split("/")[0])


async def test_a_master_without_its_replicas_is_unavailable_and_so_is_the_probe(redis_server):
    store = RedisQuotaStore(redis_server.url, key_prefix="norep")
    try:
        await store.reserve("acme", SCOPES, 0, "l1", 1000)
        await store.ping()
        # min-replicas-to-write: the old master of a failover refuses writes this way.
        assert cli(port_of(redis_server), "CONFIG", "SET", "min-replicas-to-write", "1") == "OK"
        with pytest.raises(QuotaStoreUnavailable, match="NOREPLICAS"):
            await store.reserve("acme", SCOPES, 0, "l2", 1000)
        with pytest.raises(QuotaStoreUnavailable, match="NOREPLICAS"):
            await store.ping()
    finally:
        await store.aclose()


async def test_the_probe_fails_on_a_replica(redis_server):
    store = RedisQuotaStore(redis_server.url, key_prefix="ro")
    try:
        await store.ping()
        assert cli(port_of(redis_server), "REPLICAOF", "127.0.0.1", str(free_port())) == "OK"
        with pytest.raises(QuotaStoreUnavailable, match="read only replica"):
            await store.ping()  # it answers PING, but would refuse every reservation
    finally:
        await store.aclose()


async def test_a_password_logs_in_and_is_never_described(redis_server):
    assert cli(port_of(redis_server), "CONFIG", "SET", "requirepass", "s3cret") == "OK"
    without = RedisQuotaStore(redis_server.url, key_prefix="pw", timeout_s=0.5)
    target = RedisTarget(url=redis_server.url, password="s3cret")
    with_password = RedisQuotaStore(target, key_prefix="pw")
    in_url = RedisTarget(url=redis_server.url.replace("redis://", "redis://:s3cret@"))
    try:
        with pytest.raises(QuotaStoreUnavailable):
            await without.reserve("acme", SCOPES, 0, "l1", 1000)
        held = await with_password.reserve("acme", SCOPES, 0, "l2", 1000)
        assert held.states[0].requests_remaining == 9
        assert "s3cret" not in with_password.describe() and "s3cret" not in in_url.describe()
        assert in_url.describe().startswith("redis://:***@127.0.0.1:")
        assert "s3cret" not in repr(target)
    finally:
        await without.aclose()
        await with_password.aclose()
