"""The quota store's down window (gateway/protection/quota_leases.py, policies/quota_health.py):
once one call found the shared store unanswering, requests go straight to the fail
policy without asking it, until the background probe finds it answering again.
Without that short-circuit every request would wait out the call timeout on a hung
Redis, and would leave one more orphaned lease to clean up.

A real redis-server, hung with SIGSTOP (it keeps its connections and answers
nothing): the first request pays the timeout and marks the store down; the next
ones are counted by what each leaves behind (the orphaned reservation a call that
timed out must clean up later), which is exact, and by how long they took in all,
which has a wide margin."""

from __future__ import annotations

import time

from tests.gateway.protection.test_quota_store_outage import TIMEOUT_S as CALL_TIMEOUT_S
from tests.gateway.protection.test_quota_store_outage import paused, redis_config
from tests.gateway.protection_kit import config, make, never_gone, principal, request, sample

FOLLOWERS = 20


async def test_a_store_known_down_is_not_asked_until_the_probe_finds_it(redis_server):
    p = await make(config(redis_config(redis_server, "fail_open"), requests_per_minute=10_000))
    who = await principal(p)
    try:
        warm = await p.admit(who, "m", request(), 1, never_gone)
        assert warm.reservation.store == "redis"
        await warm.release(None)
        with paused(redis_server):
            first = await p.admit(who, "m", request(), 1, never_gone)  # pays the timeout
            assert first.reservation.store == "local-fallback"
            assert not p.leases.health.up
            t0 = time.monotonic()
            for _ in range(FOLLOWERS):
                ticket = await p.admit(who, "m", request(), 1, never_gone)
                assert ticket.reservation.store == "local-fallback"
                await ticket.release(None)
            took = time.monotonic() - t0
            # Exact: only the first call reached the hung store and left an orphaned
            # lease behind; each follower asking it would leave one more.
            assert len(p.leases.pending) == 1, len(p.leases.pending)
            assert sample(p, "switchyard_quota_store_transitions_total", {"to": "down"}) == 1
            # Asking would cost FOLLOWERS x 0.3 s = 6 s; not asking, milliseconds. Half
            # of that is room for a loaded machine and still far from the 6 s.
            assert took < FOLLOWERS * CALL_TIMEOUT_S / 2, took
            await first.release(None)
    finally:
        await p.aclose()
