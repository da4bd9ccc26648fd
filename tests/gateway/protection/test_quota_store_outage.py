"""Protection (in process) in front of a real redis-server that goes away:
refused (stopped, killed and restarted on its port) or hung (SIGSTOP), under
steady traffic. The fail policy applies while it is away, the store is used
again soon after it answers whatever the traffic does meanwhile, nothing a
request held stays held, and the state is a gauge and one log line per change.

Bounds are generous and documented where they are asserted: the probe retries
at least every 0.5 s (policies/quota_health.py), and a loaded 2-core machine
adds its own delays on top."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from adapters.base import Usage
from adapters.errors import GatewayError
from gateway.protection.gate import Protection
from tests.gateway.protection_kit import config, make, never_gone, principal, request, sample
from tests.procs import Process, start_redis

# A short call timeout keeps the hung-Redis tests quick; the default is 1 s.
TIMEOUT_S = 0.3
# The probe's capped delay (0.5 s) plus room for a loaded machine.
RECOVERY_BOUND_S = 2.5


def redis_config(redis: Process, policy: str, **store) -> dict:
    return {"kind": "redis", "url": redis.url, "on_unavailable": policy, "timeout_s": TIMEOUT_S, **store}


@contextmanager
def paused(redis: Process):
    """SIGSTOP: the server keeps its connections and answers nothing until SIGCONT."""
    os.kill(redis.child.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(redis.child.pid, signal.SIGCONT)


@dataclass
class Outcome:
    at: float
    took_s: float
    result: str  # "redis", "local-fallback" or "503"


class Traffic:
    """Admits and releases one request every `gap_s` until stopped, recording each outcome."""

    def __init__(self, p: Protection, gap_s: float = 0.05) -> None:
        self.p = p
        self.gap_s = gap_s
        self.outcomes: list[Outcome] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Traffic:
        who = await principal(self.p)
        self._task = asyncio.create_task(self._run(who))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, who) -> None:
        pending: set[asyncio.Task[None]] = set()
        try:
            while True:
                task = asyncio.create_task(self._one(who))
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(self.gap_s)
        finally:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _one(self, who) -> None:
        start = time.monotonic()
        try:
            ticket = await self.p.admit(who, "m", request(max_tokens=10), 5, never_gone)
        except GatewayError as err:
            assert err.status == 503 and err.code == "quota_store_unavailable", err
            self.outcomes.append(Outcome(start, time.monotonic() - start, "503"))
            return
        self.outcomes.append(Outcome(start, time.monotonic() - start, ticket.reservation.store))
        await ticket.release(Usage(5, 10))

    def since(self, t: float) -> list[Outcome]:
        return [o for o in self.outcomes if o.at >= t]

    async def wait_for_redis_after(self, t: float, bound_s: float) -> float:
        """Seconds from `t` to the first request after it admitted through Redis."""
        deadline = time.monotonic() + bound_s + 5  # the assertion below says by how much it was late
        while True:
            served = [o for o in self.since(t) if o.result == "redis"]
            if served:
                return served[0].at - t
            assert time.monotonic() < deadline, f"Redis not used again {bound_s + 5:.1f} s after it answered"
            await asyncio.sleep(0.02)


# ---- refused ---------------------------------------------------------------------


async def test_redis_down_fail_open_uses_local_limits(redis_server):
    p = await make(
        config({"kind": "redis", "url": redis_server.url, "on_unavailable": "fail_open"}, requests_per_minute=3)
    )
    who = await principal(p)
    await (await p.admit(who, "m", request(), 1, never_gone)).release(None)
    redis_server.stop()
    admitted = 0
    for _ in range(5):
        try:
            await (await p.admit(who, "m", request(), 1, never_gone)).release(None)
            admitted += 1
        except GatewayError as e:
            assert e.status == 429
    assert admitted == 3  # the local store enforces the same limit on its own
    # Every one of the five met the fail policy (this Protection's own registry).
    assert sample(p, "switchyard_quota_store_unavailable_total", {"policy": "fail_open"}) == 5
    await p.aclose()


async def test_redis_down_fail_closed_is_503(redis_server):
    p = await make(
        config({"kind": "redis", "url": redis_server.url, "on_unavailable": "fail_closed"}, requests_per_minute=3)
    )
    who = await principal(p)
    redis_server.stop()
    with pytest.raises(GatewayError) as exc:
        await p.admit(who, "m", request(), 1, never_gone)
    assert exc.value.status == 503 and exc.value.code == "quota_store_unavailable"
    assert exc.value.retry_after is not None
    assert sample(p, "switchyard_quota_store_unavailable_total", {"policy": "fail_closed"}) == 1
    await p.aclose()


async def test_redis_coming_back_is_used_again(redis_server, tmp_path):
    # Retrying every 50 ms: traffic must not keep the store marked down.
    p = await make(
        config({"kind": "redis", "url": redis_server.url, "on_unavailable": "fail_closed"}, requests_per_minute=100)
    )
    who = await principal(p)
    redis_server.stop()
    with pytest.raises(GatewayError):
        await p.admit(who, "m", request(), 1, never_gone)
    port = redis_server.url.rsplit(":", 1)[1].split("/")[0]
    revived = start_redis(tmp_path / "revived", port=int(port))
    try:
        deadline = time.monotonic() + 10
        while True:
            await asyncio.sleep(0.05)
            try:
                t = await p.admit(who, "m", request(), 1, never_gone)
                break
            except GatewayError as e:
                assert e.code == "quota_store_unavailable" and time.monotonic() < deadline
        assert t.reservation.store == "redis"
        await t.release(None)
    finally:
        await p.aclose()
        revived.stop()


async def test_a_restarted_redis_costs_no_request_on_stale_pooled_connections(redis_server, tmp_path):
    p = await make(config(redis_config(redis_server, "fail_closed"), requests_per_minute=1000))
    who = await principal(p)
    # Fill the pool with several connections, all of which the restart kills.
    for ticket in await asyncio.gather(*(p.admit(who, "m", request(), 1, never_gone) for _ in range(16))):
        await ticket.release(None)
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    redis_server.kill()
    revived = start_redis(tmp_path / "revived", port=port)
    try:
        tickets = await asyncio.gather(*(p.admit(who, "m", request(), 1, never_gone) for _ in range(16)))
        assert {t.reservation.store for t in tickets} == {"redis"}
        for ticket in tickets:
            await ticket.release(None)
        assert sample(p, "switchyard_quota_store_transitions_total", {"to": "down"}) == 0
        assert sample(p, "switchyard_quota_store_up") == 1
    finally:
        await p.aclose()
        revived.stop()


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
async def test_a_redis_restarted_under_traffic_is_used_again_within_a_second(policy, redis_server, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="switchyard.protection")
    p = await make(config(redis_config(redis_server, policy), requests_per_minute=10_000, tokens_per_minute=10**7))
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    revived = None
    try:
        async with Traffic(p) as traffic:
            await asyncio.sleep(0.5)
            redis_server.kill()
            await asyncio.sleep(1.0)
            assert sample(p, "switchyard_quota_store_up") == 0
            revived = start_redis(tmp_path / "revived", port=port)
            answered_at = time.monotonic()
            recovered_after = await traffic.wait_for_redis_after(answered_at, RECOVERY_BOUND_S)
            await asyncio.sleep(1.0)
        assert recovered_after < RECOVERY_BOUND_S
        settled = traffic.since(answered_at + recovered_after)
        assert len(settled) > 10 and {o.result for o in settled} == {"redis"}  # nothing latched
        expected = "local-fallback" if policy == "fail_open" else "503"
        assert {o.result for o in traffic.outcomes} == {"redis", expected}
        assert sample(p, "switchyard_quota_store_up") == 1
        assert sample(p, "switchyard_quota_store_transitions_total", {"to": "down"}) == 1
        assert sample(p, "switchyard_quota_store_transitions_total", {"to": "up"}) == 1
        messages = [r.getMessage() for r in caplog.records]
        assert sum("unreachable" in m for m in messages) == 1
        assert sum("answers again" in m for m in messages) == 1
    finally:
        await p.aclose()
        if revived is not None:
            revived.stop()


# ---- hung ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
async def test_a_paused_redis_is_used_again_within_a_second_of_answering(policy, redis_server):
    p = await make(config(redis_config(redis_server, policy), requests_per_minute=10_000, tokens_per_minute=10**7))
    try:
        async with Traffic(p) as traffic:
            await asyncio.sleep(0.5)
            with paused(redis_server):
                await asyncio.sleep(1.5)
                assert sample(p, "switchyard_quota_store_up") == 0
            answered_at = time.monotonic()
            recovered_after = await traffic.wait_for_redis_after(answered_at, RECOVERY_BOUND_S)
            await asyncio.sleep(1.0)
        assert recovered_after < RECOVERY_BOUND_S
        settled = traffic.since(answered_at + recovered_after)
        assert len(settled) > 10 and {o.result for o in settled} == {"redis"}
        assert sample(p, "switchyard_quota_store_up") == 1
        assert sample(p, "switchyard_quota_store_transitions_total", {"to": "down"}) == 1
    finally:
        await p.aclose()


async def test_no_request_waits_on_a_hung_redis_longer_than_its_timeout(redis_server):
    p = await make(config(redis_config(redis_server, "fail_open"), requests_per_minute=10_000))
    try:
        async with Traffic(p, gap_s=0.02) as traffic:
            await asyncio.sleep(0.3)
            with paused(redis_server):
                stopped_at = time.monotonic()
                await asyncio.sleep(4.0)
        during = [o for o in traffic.since(stopped_at) if o.at < stopped_at + 3.5]
        assert len(during) > 20
        # The ones that met the hang waited about TIMEOUT_S; the rest did not wait at all.
        # A hang would show as seconds (the pause lasts 4).
        assert max(o.took_s for o in during) < TIMEOUT_S + 1.5, max(o.took_s for o in during)
        assert sum(o.took_s > TIMEOUT_S / 2 for o in during) < len(during) / 2
        assert {o.result for o in during} >= {"local-fallback"}
    finally:
        await p.aclose()


async def test_nothing_a_request_held_stays_held_after_a_pause(redis_server):
    """A release that could not reach the store is sent when it answers, and so is
    the lease of a reservation lost in the hang (the paused Redis runs that script
    when it wakes up): the store's lease count is back to zero long before the TTL."""
    p = await make(config(redis_config(redis_server, "fail_open", lease_ttl_s=30), max_concurrent=10))
    who = await principal(p)
    store = p.leases.store
    try:
        admitted_before = await p.admit(who, "m", request(), 1, never_gone)
        assert admitted_before.reservation.store == "redis"
        with paused(redis_server):
            lost = await p.admit(who, "m", request(), 1, never_gone)  # times out: falls back
            assert lost.reservation.store == "local-fallback"
            await admitted_before.release(Usage(1, 3))  # the store is down: kept for later
            await lost.release(Usage(1, 3))
            assert sample(p, "switchyard_quota_pending_releases") == 2  # the release, and the lost lease
        deadline = time.monotonic() + 10  # far below the 30 s TTL that would otherwise free them
        while not (p.leases.health.up and await store.concurrent("a", "t") == 0):
            assert time.monotonic() < deadline, "a lease outlived the pause"
            await asyncio.sleep(0.05)
        assert sample(p, "switchyard_quota_pending_releases") == 0
        assert sample(p, "switchyard_quota_leases_held") == 0
    finally:
        await p.aclose()
