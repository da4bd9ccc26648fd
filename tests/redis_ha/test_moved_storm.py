"""A tenant's slot moves under traffic on a real Redis Cluster, and a MOVED storm
is forced: every request takes the documented store path, no lease is left.

Traffic: a Protection (in process, `fail_closed`) admits and releases tenant a's
requests from four workers. Meanwhile the tenant's slot is migrated between two
masters the way `redis-cli --cluster reshard` does it (IMPORTING, MIGRATING,
MIGRATE of each key, SETSLOT NODE), there and back: the client meets ASK, TRYAGAIN
and MOVED. Then the slot is left half-moved with its old owner told first: it
answers MOVED to the new one, which (still importing) answers MOVED back, a
ping-pong the client gives up following. Every request is served or refused 503
`quota_store_unavailable`, never anything else; once the move completes the
store is up again, the releases that waited are sent, and no lease is left."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from adapters.base import Usage
from adapters.errors import GatewayError
from tests.gateway.protection_kit import config, make, never_gone, principal, request, sample
from tests.redis_ha.deployments import ClusterDeployment, cli, wait_until

pytestmark = pytest.mark.redis_ha

# Generous: the gateway's probe retries every 0.5 s at most; a loaded 2-core machine.
RECOVERY_BOUND_S = 20.0
STORM_S = 2.0


def node_id(port: int) -> str:
    return cli(port, "CLUSTER", "MYID")


def move_slot(cluster: ClusterDeployment, slot: int, src: int, dst: int, *, storm_s: float = 0.0) -> None:
    """Move `slot` from master `src` to master `dst` as a resharding does. With
    `storm_s`, `src` is told the new owner `storm_s` seconds before `dst` is (the
    wrong order): meanwhile each answers MOVED to the other."""
    src_id, dst_id = node_id(src), node_id(dst)
    assert cli(dst, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", src_id) == "OK"
    assert cli(src, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", dst_id) == "OK"
    while keys := cli(src, "CLUSTER", "GETKEYSINSLOT", str(slot), "100").split():
        cli(src, "MIGRATE", "127.0.0.1", str(dst), "", "0", "5000", "REPLACE", "KEYS", *keys)
        time.sleep(0.05)  # traffic meets the half-migrated slot (ASK, TRYAGAIN)
    if storm_s:
        assert cli(src, "CLUSTER", "SETSLOT", str(slot), "NODE", dst_id) == "OK"
        time.sleep(storm_s)
    # The new owner first: it bumps its epoch, so every node ends up agreeing.
    assert cli(dst, "CLUSTER", "SETSLOT", str(slot), "NODE", dst_id) == "OK"
    for port in cluster.masters():
        if port != dst:
            cli(port, "CLUSTER", "SETSLOT", str(slot), "NODE", dst_id)
    wait_until(lambda: all(cluster_owner(slot, p) == dst for p in cluster.masters()), "the move to settle")


def cluster_owner(slot: int, asked: int) -> int | None:
    """The port that node `asked` says serves `slot`."""
    for line in cli(asked, "CLUSTER", "NODES").splitlines():
        parts = line.split()
        for span in parts[8:]:
            if span.startswith("["):
                continue
            low, _, high = span.partition("-")
            if int(low) <= slot <= int(high or low):
                return int(parts[1].split("@")[0].rsplit(":", 1)[1])
    return None


async def test_slot_moves_and_a_moved_storm_take_the_store_path(cluster):
    store = {
        "kind": "redis",
        "mode": "cluster",
        "startup_nodes": cluster.startup_nodes,
        "key_prefix": uuid.uuid4().hex[:8],
        "timeout_s": 0.5,
        "on_unavailable": "fail_closed",
    }
    p = await make(config(store, max_concurrent=8, requests_per_minute=100_000))
    outcomes = {"served": 0, "store_down": 0}
    unexpected: list[BaseException] = []
    stop = asyncio.Event()
    saw_down = threading.Event()

    async def worker() -> None:
        who = await principal(p)
        while not stop.is_set():
            try:
                ticket = await p.admit(who, "m", request(), 5, never_gone)
            except GatewayError as exc:
                if exc.status == 503 and exc.code == "quota_store_unavailable":
                    outcomes["store_down"] += 1
                    if sample(p, "switchyard_quota_store_up") == 0:
                        saw_down.set()
                    await asyncio.sleep(0.01)
                    continue
                unexpected.append(exc)
                return
            except BaseException as exc:  # noqa: BLE001 - anything else is the finding
                unexpected.append(exc)
                return
            await asyncio.sleep(0.005)
            await ticket.release(Usage(5, 1))
            outcomes["served"] += 1

    try:
        lease_key = p.leases.store.keys("a", "t")[2]
        slot = cluster.keyslot(lease_key)
        home = cluster.master_of(lease_key)
        away = next(port for port in cluster.masters() if port != home)
        workers = [asyncio.create_task(worker()) for _ in range(4)]
        start = time.monotonic()
        while not outcomes["served"]:  # traffic flows before the first move
            assert not unexpected, unexpected
            assert time.monotonic() - start < RECOVERY_BOUND_S, "nothing served before the moves"
            await asyncio.sleep(0.02)
        served_before = outcomes["served"]
        assert not unexpected, unexpected

        for src, dst in ((home, away), (away, home)):
            await asyncio.to_thread(move_slot, cluster, slot, src, dst)
        served_after_moves = outcomes["served"]
        assert served_after_moves > served_before  # served while the slot moved
        await asyncio.to_thread(move_slot, cluster, slot, home, away, storm_s=STORM_S)

        start = time.monotonic()
        while not (p.leases.health.up and outcomes["served"] > served_after_moves + 20):
            assert not unexpected, unexpected
            assert time.monotonic() - start < RECOVERY_BOUND_S, "not served again after the move completed"
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*workers)
        assert not unexpected, unexpected
        assert outcomes["store_down"] > 0 and saw_down.is_set()  # the storm took the fail policy
        assert sample(p, "switchyard_quota_store_transitions_total", {"to": "down"}) >= 1

        while sample(p, "switchyard_quota_pending_releases") or not p.leases.health.up:
            assert time.monotonic() - start < RECOVERY_BOUND_S, "releases still waiting"
            await asyncio.sleep(0.05)
        assert sample(p, "switchyard_quota_store_up") == 1
        assert await p.leases.store.concurrent("a", "t") == 0
        assert cli(away, "ZCARD", lease_key) == "0"  # no lease left on the slot's owner
        assert cli(home, "CLUSTER", "COUNTKEYSINSLOT", str(slot)) == "0"  # nothing stranded behind
    finally:
        stop.set()
        await p.aclose()
