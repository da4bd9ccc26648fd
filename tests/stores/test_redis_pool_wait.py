"""stores/redis_connect.py: a call waits for a free pooled connection no longer than the
store's `timeout_s` (the quota, response and rollout stores' one Redis limit), unless a
`pool_wait_s` is given, so an operator's limit bounds that wait too; and a Sentinel
deployment none of whose sentinels answers fails a call at once, not after backoffs."""

from __future__ import annotations

import time

import pytest

from processes import free_port
from stores.redis_connect import RedisConnection, RedisTarget, RedisUnavailable, connect


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


async def test_a_call_fails_at_once_when_no_sentinel_answers():
    """redis-py's sentinel clients retry three times with a backoff of seconds by default:
    each call waited about 7 s for sentinels that refuse at once."""
    sentinels = (("127.0.0.1", free_port()), ("127.0.0.1", free_port()))
    conn = RedisConnection(RedisTarget(mode="sentinel", sentinels=sentinels, service_name="main"), timeout_s=0.3)
    try:
        t = time.monotonic()
        with pytest.raises(RedisUnavailable, match="No master found for 'main'"):
            await conn.command("PING")
        assert time.monotonic() - t < 1.5
    finally:
        await conn.aclose()
