"""What a mutation run of gateway/openai/responses/store_redis.py left open, none of
which needs a server: the default key prefix, the TTL in whole milliseconds (never 0),
the connection options passed on, and the 413 of a record over the share naming its
size and the limit (refused before any call to Redis)."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses import RedisResponseStore, StoredResponse
from stores.redis_connect import hash_tag

NOWHERE = "redis://127.0.0.1:9"  # never dialled: these tests make no call


def test_keys_use_the_switchyard_prefix_by_default():
    store = RedisResponseStore(NOWHERE)
    assert store.key("t", "resp_a") == hash_tag("switchyard", "t") + ":response:resp_a"


@pytest.mark.parametrize(("ttl_s", "ttl_ms"), [(2.5, 2500), (0.0015, 1), (0.0001, 1), (0.0, 1)])
def test_the_ttl_is_whole_milliseconds_and_never_zero(ttl_s, ttl_ms):
    assert RedisResponseStore(NOWHERE, ttl_s=ttl_s).ttl_ms == ttl_ms


def test_the_connection_options_reach_the_connection():
    store = RedisResponseStore(NOWHERE, timeout_s=7.5)
    assert store.redis.pool_wait_s == 7.5


async def test_a_record_over_the_share_is_refused_naming_its_size_and_the_limit():
    store = RedisResponseStore(NOWHERE, tenant_max_bytes=100)
    record = StoredResponse({"id": "resp_a", "output": [], "pad": "x" * 200}, [])
    size = len(record.to_bytes())
    with pytest.raises(GatewayError) as info:
        await store.put("t", record)
    assert (info.value.status, info.value.code) == (413, "response_too_large")
    assert f"at least {size} bytes to store, more than the 100 this gateway stores" in info.value.message
