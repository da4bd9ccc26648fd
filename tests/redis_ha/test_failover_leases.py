"""A lease lost in a real failover comes back, on a Redis Cluster and behind
Sentinel: a Protection (in process) holds two leases, the second one written to a
master whose replica was just cut off (its link closed, and a password set that
its reconnection does not know, so it never gets that write), and the master is
killed with SIGKILL. The replica takes over without that lease; the
gateway sees the outage, and its recovery probe puts the lease back before shared
limits apply again, so the concurrency limit is exact from the first request
after the failover."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from adapters.base import Usage
from adapters.errors import GatewayError
from tests.gateway.protection_kit import config, make, never_gone, principal, request, sample
from tests.redis_ha.deployments import SERVICE, ClusterDeployment, SentinelDeployment, cli, info, wait_until

pytestmark = pytest.mark.redis_ha

# The cluster or the sentinels notice a dead master after 1 s (NODE_TIMEOUT_MS) and
# promote its replica within a few more; the gateway's probe retries every 0.5 s.
RECOVERY_BOUND_S = 20.0
CUT_OFF = "a-password-the-replica-does-not-know"


@pytest.fixture(params=["cluster", "sentinel"])
def fresh(request, tmp_path):
    """A deployment of its own: the test kills a master."""
    deployment = ClusterDeployment(tmp_path) if request.param == "cluster" else SentinelDeployment(tmp_path)
    yield deployment
    deployment.stop()


def store_config(deployment: ClusterDeployment | SentinelDeployment) -> dict:
    where = (
        {"mode": "cluster", "startup_nodes": deployment.startup_nodes}
        if isinstance(deployment, ClusterDeployment)
        else {"mode": "sentinel", "sentinels": deployment.sentinels, "service_name": SERVICE}
    )
    return {
        "kind": "redis",
        **where,
        "key_prefix": uuid.uuid4().hex[:8],
        "timeout_s": 2.0,  # generous: a slow call on a loaded machine would be a 503; a dead master refuses at once
        "lease_ttl_s": 3,  # a heartbeat every second
        "on_unavailable": "fail_closed",
    }


def offsets_equal(master: int, replica: int) -> bool:
    return info(master, "replication").get("master_repl_offset") == info(replica, "replication").get(
        "slave_repl_offset"
    )


async def test_a_lease_lost_in_a_failover_is_back_before_shared_limits_apply(fresh):
    p = await make(config(store_config(fresh), max_concurrent=3))
    try:
        who = await principal(p)
        kept = await p.admit(who, "m", request(), 5, never_gone)
        lease_key = p.leases.store.keys("a", "t")[2]
        if isinstance(fresh, ClusterDeployment):
            master = fresh.master_of(lease_key)
            replica = fresh.replica_of(master)
        else:
            master = fresh.master()
            replica = next(port for port in fresh.data_ports() if port != master)
        wait_until(lambda: offsets_equal(master, replica), "the replica to have the first lease")

        # The gateway's pooled connection stays logged in; the replica's next one is refused.
        assert cli(master, "CONFIG", "SET", "requirepass", CUT_OFF) == "OK"
        assert cli(master, "CLIENT", "KILL", "TYPE", "replica", password=CUT_OFF) == "1"
        lost = await p.admit(who, "m", request(), 5, never_gone)  # written to the master only
        assert info(master, "replication", password=CUT_OFF)["connected_slaves"] == "0"
        fresh.servers[master].kill()
        # In a thread: the gateway's heartbeat runs meanwhile, and finds the outage.
        if isinstance(fresh, ClusterDeployment):
            await asyncio.to_thread(fresh.wait_promoted, replica)
        else:
            await asyncio.to_thread(fresh.wait_new_master, master)
        assert cli(replica, "ZCARD", lease_key) == "1"  # the new master lacks the second lease

        start = time.monotonic()
        while not (p.leases.health.up and sample(p, "switchyard_quota_store_transitions_total", {"to": "up"})):
            assert time.monotonic() - start < RECOVERY_BOUND_S, "the gateway did not use the new master"
            await asyncio.sleep(0.02)
        # Back before shared limits applied again: the probe re-created it.
        assert await p.leases.store.concurrent("a", "t") == 2
        assert p.leases.store.leases_recreated == 1
        third = await p.admit(who, "m", request(), 5, never_gone)
        with pytest.raises(GatewayError) as refused:
            await p.admit(who, "m", request(), 5, never_gone)
        assert refused.value.status == 429 and refused.value.code == "concurrency_limit_exceeded"
        for ticket in (kept, lost, third):
            await ticket.release(Usage(5, 1))
        assert await p.leases.store.concurrent("a", "t") == 0
    finally:
        await p.aclose()
