"""stores/redis_connect.py: a call waits for a free pooled connection no longer than the
store's `timeout_s` (the quota, response and rollout stores' one Redis limit), unless a
`pool_wait_s` is given, so an operator's limit bounds that wait too."""

from __future__ import annotations

import time

import pytest

from stores.redis_connect import RedisUnavailable, connect


@pytest.mark.parametrize(
    ("options", "waits_s"), [({"timeout_s": 0.3}, 0.3), ({"timeout_s": 0.3, "pool_wait_s": 0.8}, 0.8)]
)
async def test_a_call_waits_for_a_connection_as_long_as_the_call_timeout(redis_server, options, waits_s):
    conn = connect(redis_server.url, max_connections=1, **options)
    try:
        assert await conn.command("PING")
        assert conn._pool is not None
        held = await conn._pool.get_connection()  # every connection in use
        t = time.monotonic()
        with pytest.raises(RedisUnavailable):
            await conn.command("PING")
        waited = time.monotonic() - t
        assert waits_s - 0.05 <= waited < 1.5, waited  # the old fixed wait was 2 s, whatever timeout_s said
        await conn._pool.release(held)
        assert await conn.command("PING")
    finally:
        await conn.aclose()
