"""Redis goes away under steady traffic (about 10 requests/s to each gateway), in
front of real gateway processes with each fail policy: paused with SIGSTOP for
1.5 s, or killed and restarted on its port. While it is away the policy applies
(fail_open serves on per-replica limits, fail_closed answers 503
quota_store_unavailable) and `switchyard_quota_store_up` reads 0; soon after it
answers again the gateways use it again, whatever the traffic does meanwhile,
and nothing stays latched: every later request is served through Redis.

Bounds wait on state and are generous on purpose (the machine may be a loaded
2-core one): each is named and explained where it is defined. The longer hang
(6 s) is in the slow tier (`make test-adversity`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest

from tests.chaos.fleet import STORE_TIMEOUT_S, Fleet, Traffic, scrape, wait_for_gauge

# How soon after Redis answers again `switchyard_quota_store_up` must read 1: the
# probe retries at least every 0.5 s and the gauge is polled every 20 ms; the rest
# is room for a loaded machine (gateways, Redis, the upstream and this client share it).
RECOVERY_BOUND_S = 2.5
UP = "switchyard_quota_store_up"
DOWN_TRANSITIONS = 'switchyard_quota_store_transitions_total{to="down"}'
UP_TRANSITIONS = 'switchyard_quota_store_transitions_total{to="up"}'
FELL_BACK = 'switchyard_quota_store_unavailable_total{policy="fail_open"}'


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("chaos"))
    yield f
    f.stop()


async def scrape_all(client: httpx.AsyncClient, fleet: Fleet) -> dict[str, dict[str, float]]:
    return {name: await scrape(client, gw) for name, gw in fleet.gateways.items()}


async def recovery_times(client: httpx.AsyncClient, fleet: Fleet) -> dict[str, float]:
    times = await asyncio.gather(
        *(wait_for_gauge(client, gw, UP, 1.0, RECOVERY_BOUND_S + 5) for gw in fleet.gateways.values())
    )
    return dict(zip(fleet.gateways, times))


def check_outage(traffic: Traffic, before: dict, recovered: dict, settled: dict, after: dict, answered_at: float):
    for name, took in recovered.items():
        assert took < RECOVERY_BOUND_S, f"{name}: Redis used again {took:.2f} s after it answered"
        # One transition each way, however many requests met the outage.
        assert after[name][DOWN_TRANSITIONS] - before[name].get(DOWN_TRANSITIONS, 0) == 1
        assert after[name][UP_TRANSITIONS] - before[name].get(UP_TRANSITIONS, 0) == 1
        later = traffic.of(name, since=answered_at + took)
        assert len(later) >= 10, "too little traffic after the recovery to judge it"
        assert {a.status for a in later} == {200}, [(a.status, a.code) for a in later if a.status != 200]
    # fail_open kept serving; after the recovery it stopped falling back (nothing latched).
    assert {a.status for a in traffic.of("fail_open")} == {200}
    assert after["fail_open"][FELL_BACK] > before["fail_open"].get(FELL_BACK, 0)
    assert after["fail_open"][FELL_BACK] == settled["fail_open"][FELL_BACK]
    # fail_closed refused while Redis was away, with the policy's own error.
    refused = [a for a in traffic.of("fail_closed") if a.status != 200]
    assert refused and {(a.status, a.code) for a in refused} == {(503, "quota_store_unavailable")}


async def outage_under_traffic(fleet, outage: Callable[[httpx.AsyncClient], Awaitable[dict]]) -> None:
    """Traffic through an outage: `outage` breaks Redis, returns every gateway's
    metrics scraped while it is broken, and returns once Redis answers again."""
    async with httpx.AsyncClient(timeout=10) as client:
        before = await scrape_all(client, fleet)
        async with Traffic(fleet) as traffic:
            await asyncio.sleep(1.0)
            during = await outage(client)
            answered_at = time.monotonic()
            recovered = await recovery_times(client, fleet)
            settled = await scrape_all(client, fleet)
            await asyncio.sleep(2.0)
        after = await scrape_all(client, fleet)
    assert {s[UP] for s in during.values()} == {0.0}
    check_outage(traffic, before, recovered, settled, after, answered_at)


async def test_redis_paused_for_1_5_s_under_traffic(fleet):
    async def pause(client: httpx.AsyncClient) -> dict:
        with fleet.redis_paused():
            await asyncio.sleep(1.5)
            return await scrape_all(client, fleet)

    await outage_under_traffic(fleet, pause)


async def test_redis_killed_and_restarted_under_traffic(fleet):
    async def kill_and_restart(client: httpx.AsyncClient) -> dict:
        fleet.kill_redis()
        await asyncio.sleep(1.0)
        during = await scrape_all(client, fleet)
        fleet.restart_redis()  # returns once it answers PING
        return during

    await outage_under_traffic(fleet, kill_and_restart)


@pytest.mark.slow
async def test_no_request_hangs_with_a_hung_redis(fleet):
    """Paused for 6 s: every request is answered within the store's call timeout
    plus a margin, far below the pause a request without a timeout would wait."""
    pause_s = 6.0
    # STORE_TIMEOUT_S for the calls that met the hang, plus room for a loaded machine.
    bound_s = STORE_TIMEOUT_S + 2.0
    async with httpx.AsyncClient(timeout=10) as client, Traffic(fleet) as traffic:
        await asyncio.sleep(1.0)
        with fleet.redis_paused():
            paused_at = time.monotonic()
            await asyncio.sleep(pause_s)
            answered = list(traffic.answers)
        await recovery_times(client, fleet)
    during = [a for a in answered if a.at >= paused_at]
    for name in fleet.gateways:
        mine = [a for a in during if a.gateway == name]
        # sent during the pause and answered before it ended: none waited for Redis
        assert len(mine) >= 10 * (pause_s - bound_s) * 0.5, len(mine)
        assert max(a.took_s for a in mine) < bound_s, max(a.took_s for a in mine)
    assert {a.status for a in during if a.gateway == "fail_open"} == {200}
    assert {a.status for a in during if a.gateway == "fail_closed"} == {503}
