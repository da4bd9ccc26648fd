"""Each tenant's share of the response store (finding 2 of issue 25), memory and a
real redis-server: a tenant's new responses push out only its own oldest, never
another tenant's; a response over the byte share is refused with 413 before
anything is generated; the memory store, full, refuses a tenant with nothing of
its own to give up rather than evict another's."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from adapters.errors import GatewayError
from gateway.openai.responses.store import ResponseNotFound
from gateway.openai.responses.store_memory import MemoryResponseStore
from gateway.openai.responses.store_redis import RedisResponseStore
from tests.gateway.openai.responses.served import ScriptedModel
from tests.gateway.openai.responses.test_handlers import create, say
from tests.gateway.openai.responses.test_store import record

SIZE = len(record("resp_0", "x" * 1000).to_bytes())


@pytest.fixture(params=["memory", "redis"])
def make_store(request):
    """A store of the param's kind with the share given (each test closes it)."""

    def make(**share):
        if request.param == "memory":
            return MemoryResponseStore(**share)
        # a generous timeout: these tests are about shares, and a loaded machine is slow
        return RedisResponseStore(request.getfixturevalue("redis_server").url, timeout_s=5.0, **share)

    return make


async def close(store) -> None:
    await store.aclose()


async def test_another_tenant_s_many_responses_never_push_out_mine(make_store):
    store = make_store(tenant_max_entries=5)
    try:
        await store.put("a", record("resp_a", "mine"))
        for i in range(12):
            await store.put("b", record(f"resp_b{i}"))
        assert (await store.get("a", "resp_a")).context[0]["content"][0]["text"] == "mine"
        for i in range(7):  # b's own oldest made the room
            with pytest.raises(ResponseNotFound):
                await store.get("b", f"resp_b{i}")
        for i in range(7, 12):
            assert (await store.get("b", f"resp_b{i}")).id == f"resp_b{i}"
    finally:
        await close(store)


async def test_another_tenant_s_large_responses_never_push_out_mine(make_store):
    store = make_store(tenant_max_bytes=SIZE * 3 + 10)
    try:
        await store.put("a", record("resp_a", "x" * 1000))
        for i in range(10):
            await store.put("b", record(f"resp_b{i}", "x" * 1000))
        assert (await store.get("a", "resp_a")).id == "resp_a"
        kept = []
        for i in range(10):
            try:
                kept.append((await store.get("b", f"resp_b{i}")).id)
            except ResponseNotFound:
                pass
        assert kept == ["resp_b7", "resp_b8", "resp_b9"]  # b's share: its three newest
    finally:
        await close(store)


async def test_a_response_over_the_tenant_s_share_is_413(make_store):
    store = make_store(tenant_max_bytes=SIZE * 2)
    try:
        with pytest.raises(GatewayError) as info:
            await store.put("a", record("resp_big", "x" * (SIZE * 2)))
        assert info.value.status == 413 and info.value.code == "response_too_large"
        with pytest.raises(ResponseNotFound):
            await store.get("a", "resp_big")
    finally:
        await close(store)


async def test_deleting_and_replacing_give_the_bytes_back(make_store):
    store = make_store(tenant_max_bytes=SIZE * 2 + 10)
    try:
        await store.put("a", record("resp_1", "x" * 1000))
        await store.put("a", record("resp_1", "x" * 1000))  # the same id again: counted once
        await store.put("a", record("resp_2", "x" * 1000))
        await store.delete("a", "resp_2")
        await store.put("a", record("resp_3", "x" * 1000))
        assert (await store.get("a", "resp_1")).id == "resp_1"  # nothing had to go
        assert (await store.get("a", "resp_3")).id == "resp_3"
    finally:
        await close(store)


async def test_redis_expired_responses_leave_the_tenant_s_share(redis_server):
    store = RedisResponseStore(redis_server.url, ttl_s=0.3, tenant_max_entries=2)
    try:
        await store.put("a", record("resp_1"))
        await store.put("a", record("resp_2"))
        await asyncio.sleep(0.5)
        await store.put("a", record("resp_3"))
        _, index, sizes, total = store.keys("a", "resp_3")
        client = store.redis.client
        assert await client.zrange(index, 0, -1) == [b"resp_3"]
        assert await client.hkeys(sizes) == [b"resp_3"]
        assert int(await client.get(total)) == len(record("resp_3").to_bytes())
    finally:
        await store.aclose()


async def test_memory_full_refuses_a_tenant_with_nothing_to_give_up():
    store = MemoryResponseStore(max_entries=4, tenant_max_entries=2)
    await store.put("a", record("resp_a1"))
    await store.put("a", record("resp_a2"))
    await store.put("b", record("resp_b1"))
    await store.put("b", record("resp_b2"))
    with pytest.raises(GatewayError) as info:
        await store.put("c", record("resp_c1"))
    assert info.value.status == 503 and info.value.code == "response_store_full"
    await store.put("a", record("resp_a3"))  # a gives up its own oldest
    assert len(store) == 4
    for tenant, rid in (("a", "resp_a2"), ("a", "resp_a3"), ("b", "resp_b1"), ("b", "resp_b2")):
        assert (await store.get(tenant, rid)).id == rid
    for tenant, rid in (("a", "resp_a1"), ("c", "resp_c1")):
        with pytest.raises(ResponseNotFound):
            await store.get(tenant, rid)


async def test_a_request_over_the_share_is_refused_before_generation():
    """Finding 2: a 3.9 MB `text.format.schema` was echoed, stored and charged 5
    tokens. It cannot be stored in a 1 MiB share: 413 before anything runs."""
    store = MemoryResponseStore(tenant_max_bytes=1 << 20)
    model = ScriptedModel([say("x")])
    schema = {"type": "object", "description": "y" * (2 << 20)}
    body = {"input": "q", "text": {"format": {"type": "json_schema", "name": "s", "schema": schema}}}
    with pytest.raises(GatewayError) as info:
        await create(store, model, **body)
    assert info.value.status == 413 and info.value.code == "response_too_large"
    assert model.adapter.requests == [] and len(store) == 0
    # Not stored, nothing to refuse.
    done = await create(store, model, store=False, **body)
    assert done.body["status"] == "completed"


async def test_the_redis_store_evicts_in_put_order_even_when_the_clock_says_otherwise(redis_server):
    """Puts in one millisecond share Redis's time, and a clock can step back: the
    index orders them by put anyway, so the oldest put is the one evicted."""
    store = RedisResponseStore(redis_server.url, tenant_max_entries=2, timeout_s=5.0)
    raw = aioredis.from_url(redis_server.url)
    try:
        await store.put("a", record("resp_z", "first"))
        index = store.keys("a", "resp_z")[1]
        # as if resp_z had been put an hour from now: what follows still sorts after it
        await raw.zadd(index, {"resp_z": (await raw.time())[0] * 1000 + 3_600_000})
        await store.put("a", record("resp_a", "second"))
        await store.put("a", record("resp_m", "third"))  # the share is 2: the first put goes
        with pytest.raises(ResponseNotFound):
            await store.get("a", "resp_z")
        assert [(await store.get("a", i)).id for i in ("resp_a", "resp_m")] == ["resp_a", "resp_m"]
    finally:
        await raw.aclose()
        await close(store)
