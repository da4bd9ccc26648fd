"""Two gateway processes sharing a real Redis Cluster or Sentinel set: limits are
exact across them, and stay so through a failover under traffic, outside the
window docs/operations.md ("Redis in production") states: a manual cluster
failover loses nothing; a master killed with SIGKILL loses at most what it took
in its last moments; a Sentinel failover loses what the old master took until
the gateways see the failover in progress (they ask every MASTER_WATCH_S: the
window ends when each gateway has counted the store down, as seen on its metrics,
not at a guess of how late a loaded machine looks), and from then until they see
the new master they apply the fail policy. The gateways find the new master by
themselves, no request fails with a 5xx other than the fail policy's 503, and
every lease lost comes back.

Bounds are generous on purpose (a loaded 2-core machine runs every process
here) and explained where they are defined."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
import openai
import pytest

from tests.chaos.fleet import scrape
from tests.redis_ha.deployments import ClusterDeployment, SentinelDeployment
from tests.redis_ha.fleet import TENANTS, Fleet, Traffic, key_of

pytestmark = pytest.mark.redis_ha

STEADY_RPM = TENANTS["steady"]["requests_per_minute"]
STEADY_CONCURRENT = TENANTS["steady"]["max_concurrent"]
# A request is charged in Redis between being sent and answered (Traffic.open_during);
# a charge this long before a loss window's start counts as in it too (a write the
# master may not have passed on to its replica yet).
BEFORE_WINDOW_S = 0.5
# How long the traffic may run to reach the tenant's rate limit after a failover.
TRAFFIC_BOUND_S = 30.0
# How long the gateways may take to meet a Sentinel failover (they ask every 0.5 s).
SEEN_BOUND_S = 30.0
STORE_DOWN = 'switchyard_quota_store_transitions_total{to="down"}'


@pytest.fixture(scope="module", params=["cluster", "sentinel"])
def fleet(request, tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("fleet"), request.getfixturevalue(request.param))
    yield f
    f.stop()


def own_fleet(tmp_path, deployment):
    """A fleet on a deployment of its own, both stopped after the test."""
    try:
        f = Fleet(tmp_path, deployment)
    except BaseException:
        deployment.stop()
        raise
    yield f
    f.stop()
    deployment.stop()


@pytest.fixture
def cluster_fleet(tmp_path):
    yield from own_fleet(tmp_path, ClusterDeployment(tmp_path / "cluster"))


@pytest.fixture
def sentinel_fleet(tmp_path):
    yield from own_fleet(tmp_path, SentinelDeployment(tmp_path / "sentinel"))


async def test_two_gateways_admit_exactly_60_of_200(fleet):
    clients = [
        openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=key_of("exact"), max_retries=0) for gw in fleet.gateways
    ]
    at_once = asyncio.Semaphore(20)

    async def one(i: int) -> str:
        async with at_once:
            try:
                await clients[i % 2].chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4
                )
            except openai.RateLimitError as exc:
                return exc.code or "429"
            return "ok"

    outcomes = Counter(await asyncio.gather(*(one(i) for i in range(200))))
    assert outcomes == {"ok": 60, "rate_limit_exceeded": 140}
    for c in clients:
        await c.close()


async def test_concurrency_is_never_exceeded_across_two_gateways(fleet):
    async with httpx.AsyncClient(timeout=10) as client:
        await fleet.upstream_stats(client, reset=True)
        async with Traffic(fleet, "conc", rate=40, upstream_ms=200) as traffic:
            await asyncio.sleep(3)
        stats = await fleet.upstream_stats(client)
    codes = Counter((a.status, a.code) for a in traffic.answers)
    assert set(codes) == {(200, None), (429, "concurrency_limit_exceeded")}, codes
    # About 8 requests would run at once without the limit.
    assert 3 <= stats["max_inflight"] <= TENANTS["conc"]["max_concurrent"], stats


Failover = Callable[[Fleet], Awaitable[tuple[float, float]]]


@dataclass
class Run:
    traffic: Traffic
    window: tuple[float, float]  # when the failover may lose writes (monotonic time)
    until_window_end: dict  # the upstream's stats up to the window's end
    after: dict  # and after it
    metrics: dict[int, dict[str, float]]  # each gateway's, at the end


async def run_through(fleet: Fleet, failover: Failover) -> Run:
    """Steady traffic; the failover after 2 s (it returns its loss window); then
    traffic until the tenant's rate limit has refused 20 requests."""
    async with httpx.AsyncClient(timeout=10) as client:
        await fleet.upstream_stats(client, reset=True)
        async with Traffic(fleet, "steady") as traffic:
            await asyncio.sleep(2)
            window = await failover(fleet)
            until_window_end = await fleet.upstream_stats(client, reset=True)
            start = time.monotonic()
            while sum(a.code == "rate_limit_exceeded" for a in traffic.answers) < 20:
                assert time.monotonic() - start < TRAFFIC_BOUND_S, Counter((a.status, a.code) for a in traffic.answers)
                await asyncio.sleep(0.2)
        after = await fleet.upstream_stats(client)
        metrics = {i: await scrape(client, gw) for i, gw in enumerate(fleet.gateways)}
    return Run(traffic, window, until_window_end, after, metrics)


def check(run: Run, *, lost_allowed: bool) -> None:
    traffic, window = run.traffic, run.window
    codes = Counter((a.status, a.code) for a in traffic.answers)
    allowed = {
        (200, None),
        (429, "rate_limit_exceeded"),
        (429, "concurrency_limit_exceeded"),
        (503, "quota_store_unavailable"),  # fail_closed while no master answers
    }
    assert set(codes) <= allowed, codes
    admitted = codes[(200, None)]
    # A reservation whose answer was lost is charged but refused (503): the lower bound.
    assert admitted >= STEADY_RPM - codes[(503, "quota_store_unavailable")], codes
    in_window = sum(a.status == 200 for a in traffic.open_during(window[0] - BEFORE_WINDOW_S, window[1]))
    assert admitted <= STEADY_RPM + (in_window if lost_allowed else 0), (codes, in_window)
    # Nothing latched: the end of the run is judged by the shared limits again.
    last = traffic.answers[-15:]
    assert {a.code for a in last} <= {None, "rate_limit_exceeded", "concurrency_limit_exceeded"}, last
    assert all(m["switchyard_quota_store_up"] == 1 for m in run.metrics.values())
    # After the window the concurrency limit is exact again: lost leases were put back.
    assert run.after["max_inflight"] <= STEADY_CONCURRENT, run.after


def seen_as_an_outage(run: Run) -> bool:
    return all(m['switchyard_quota_store_transitions_total{to="up"}'] >= 1 for m in run.metrics.values())


async def test_a_manual_cluster_failover_loses_nothing(cluster_fleet):
    async def failover(fleet: Fleet) -> tuple[float, float]:
        deployment = fleet.deployment
        assert isinstance(deployment, ClusterDeployment)
        replica = deployment.replica_of(deployment.master_of(fleet.lease_key("steady")))
        start = time.monotonic()
        await asyncio.to_thread(deployment.failover, replica)
        assert deployment.master_of(fleet.lease_key("steady")) == replica
        return start, time.monotonic()

    run = await run_through(cluster_fleet, failover)
    check(run, lost_allowed=False)
    assert run.until_window_end["max_inflight"] <= STEADY_CONCURRENT, run.until_window_end


async def test_a_killed_cluster_master_is_replaced_and_limits_stay_exact(cluster_fleet):
    async def failover(fleet: Fleet) -> tuple[float, float]:
        deployment = fleet.deployment
        assert isinstance(deployment, ClusterDeployment)
        master = deployment.master_of(fleet.lease_key("steady"))
        replica = deployment.replica_of(master)
        killed = time.monotonic()
        deployment.kill(master)
        await asyncio.to_thread(deployment.wait_promoted, replica)
        return killed, killed  # what the master took but had not sent its replica yet

    run = await run_through(cluster_fleet, failover)
    check(run, lost_allowed=True)
    assert seen_as_an_outage(run)
    # Leases the dead master took are back before shared limits apply again.
    assert run.until_window_end["max_inflight"] <= STEADY_CONCURRENT, run.until_window_end


async def store_down_counts(client: httpx.AsyncClient, fleet: Fleet) -> list[float]:
    return [(await scrape(client, gw)).get(STORE_DOWN, 0.0) for gw in fleet.gateways]


async def test_a_sentinel_failover_loses_only_what_came_before_the_gateways_saw_it(sentinel_fleet):
    async def failover(fleet: Fleet) -> tuple[float, float]:
        deployment = fleet.deployment
        assert isinstance(deployment, SentinelDeployment)
        async with httpx.AsyncClient(timeout=10) as client:
            before = await store_down_counts(client, fleet)
            start = time.monotonic()
            await asyncio.to_thread(deployment.failover)
            # The old master takes writes until a gateway next asks the sentinels; from
            # then on its calls fail closed, the first of them counting the store down.
            # The window ends once every gateway has: seen, not guessed from the load.
            while True:
                counts = await store_down_counts(client, fleet)
                if all(now > then for now, then in zip(counts, before, strict=True)):
                    break
                assert time.monotonic() - start < SEEN_BOUND_S, ("a gateway never met the failover", counts)
                await asyncio.sleep(0.02)
        return start, time.monotonic()

    run = await run_through(sentinel_fleet, failover)
    check(run, lost_allowed=True)
    assert seen_as_an_outage(run)


async def test_a_killed_sentinel_master_is_replaced_and_limits_stay_exact(sentinel_fleet):
    async def failover(fleet: Fleet) -> tuple[float, float]:
        deployment = fleet.deployment
        assert isinstance(deployment, SentinelDeployment)
        killed = time.monotonic()
        old = deployment.kill_master()
        await asyncio.to_thread(deployment.wait_new_master, old)
        return killed, killed

    run = await run_through(sentinel_fleet, failover)
    check(run, lost_allowed=True)
    assert seen_as_an_outage(run)
    assert run.until_window_end["max_inflight"] <= STEADY_CONCURRENT, run.until_window_end
