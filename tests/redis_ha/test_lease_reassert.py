"""The heartbeat re-creates missing leases, so it must never bring back the lease
of a request released while the heartbeat was on its way (the release may reach
Redis first). A real redis-server, a Protection in process."""

from __future__ import annotations

import asyncio
import uuid

from adapters.base import Usage
from policies.auth import hash_key
from tests.gateway.protection_kit import make, never_gone, principal, request

TENANTS = [f"t{i}" for i in range(6)]


def key(tenant: str) -> str:
    return f"sk-sy-reassert-{tenant}"


async def test_a_release_during_a_heartbeat_never_leaves_its_lease_behind(redis_server):
    p = await make(
        {
            "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key(key(t)), "tenant": t} for t in TENANTS]},
            "quota_store": {"kind": "redis", "url": redis_server.url, "key_prefix": uuid.uuid4().hex[:8]},
            "tenants": {t: {"max_concurrent": 100} for t in TENANTS},
        }
    )
    try:
        # The other tenants' leases are held throughout: the heartbeat refreshes one
        # tenant after the other, so t0's releases often reach Redis before t0's refresh.
        others = [await p.admit(await principal(p, key(t)), "m", request(), 5, never_gone) for t in TENANTS[1:]]
        who = await principal(p, key("t0"))
        for _ in range(30):
            tickets = [await p.admit(who, "m", request(), 5, never_gone) for _ in range(4)]
            assert await p.leases.store.concurrent("t0", "t") == 4
            beat = asyncio.create_task(p.leases.reassert_leases())
            await asyncio.gather(*(t.release(Usage(5, 1)) for t in tickets))
            await beat
            assert await p.leases.store.concurrent("t0", "t") == 0
        for t in TENANTS[1:]:
            assert await p.leases.store.concurrent(t, "t") == 1
        for ticket in others:
            await ticket.release(Usage(5, 1))
    finally:
        await p.aclose()
