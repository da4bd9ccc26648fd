"""The response stores, memory and a real redis-server: round trips, expiry,
bounds, and tenant isolation (another tenant's id is simply not there)."""

from __future__ import annotations

import asyncio

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.store import ResponseNotFound, StoredResponse
from gateway.openai.responses.store_memory import MemoryResponseStore
from gateway.openai.responses.store_redis import RedisResponseStore
from tests.procs import free_port


def record(response_id: str = "resp_1", text: str = "hello") -> StoredResponse:
    output = [{"id": "msg_o", "type": "message", "role": "assistant", "status": "completed", "content": []}]
    context = [
        {
            "id": "msg_i",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": text}],
        }
    ]
    return StoredResponse({"id": response_id, "object": "response", "output": output}, context)


@pytest.fixture(params=["memory", "redis"])
async def store(request):
    if request.param == "memory":
        s = MemoryResponseStore()
    else:
        s = RedisResponseStore(request.getfixturevalue("redis_server").url)
    yield s
    await s.aclose()


async def test_round_trip(store):
    await store.put("t", record("resp_1", "q"))
    got = await store.get("t", "resp_1")
    assert got == record("resp_1", "q")
    assert got.conversation() == got.context + got.response["output"]


async def test_a_stored_record_cannot_be_changed_through_an_object(store):
    rec = record()
    await store.put("t", rec)
    rec.context.append({"type": "junk"})
    got = await store.get("t", "resp_1")
    got.response["output"].clear()
    again = await store.get("t", "resp_1")
    assert len(again.context) == 1 and len(again.response["output"]) == 1


async def test_delete_then_missing(store):
    await store.put("t", record())
    await store.delete("t", "resp_1")
    await assert_absent(store, "t", "resp_1")


async def assert_absent(store, tenant: str, response_id: str) -> None:
    """Neither read nor deleted: the tenant has no such response."""
    with pytest.raises(ResponseNotFound):
        await store.get(tenant, response_id)
    with pytest.raises(ResponseNotFound):
        await store.delete(tenant, response_id)


async def test_tenants_never_see_each_other(store):
    await store.put("alice", record("resp_1", "alice's"))
    await assert_absent(store, "bob", "resp_1")
    assert (await store.get("alice", "resp_1")).context[0]["content"][0]["text"] == "alice's"
    # the same id under two tenants is two records
    await store.put("bob", record("resp_1", "bob's"))
    assert (await store.get("alice", "resp_1")).context[0]["content"][0]["text"] == "alice's"
    assert (await store.get("bob", "resp_1")).context[0]["content"][0]["text"] == "bob's"


async def test_tenant_names_cannot_reach_into_another_namespace(store):
    # a tenant named like another tenant's key prefix must not collide
    await store.put("a", record("resp_1", "a"))
    with pytest.raises(ResponseNotFound):
        await store.get("a}:response:resp_1{", "resp_1")
    with pytest.raises(ResponseNotFound):
        await store.get("", "resp_1")


async def test_memory_expiry():
    now = [1000.0]
    store = MemoryResponseStore(ttl_s=60, clock=lambda: now[0])
    await store.put("t", record("resp_1"))
    now[0] += 59
    assert (await store.get("t", "resp_1")).id == "resp_1"
    now[0] += 2
    with pytest.raises(ResponseNotFound):
        await store.get("t", "resp_1")
    with pytest.raises(ResponseNotFound):
        await store.delete("t", "resp_1")
    assert len(store) == 0


async def test_memory_expired_entries_are_dropped_when_storing():
    now = [0.0]
    store = MemoryResponseStore(ttl_s=10, clock=lambda: now[0])
    for i in range(5):
        await store.put("t", record(f"resp_{i}"))
    now[0] = 11
    await store.put("t", record("resp_new"))
    assert len(store) == 1


async def test_memory_is_bounded_by_entries_oldest_first():
    store = MemoryResponseStore(max_entries=3)
    for i in range(5):
        await store.put("t", record(f"resp_{i}"))
    assert len(store) == 3
    for gone in ("resp_0", "resp_1"):
        with pytest.raises(ResponseNotFound):
            await store.get("t", gone)
    assert (await store.get("t", "resp_4")).id == "resp_4"


async def test_memory_is_bounded_by_bytes():
    size = len(record("resp_0", "x" * 1000).to_bytes())
    store = MemoryResponseStore(max_bytes=size * 2 + 10)
    for i in range(4):
        await store.put("t", record(f"resp_{i}", "x" * 1000))
    assert len(store) == 2 and store.bytes_used <= store.max_bytes
    with pytest.raises(GatewayError) as info:
        await store.put("t", record("resp_big", "x" * 10_000))
    assert info.value.status == 413 and info.value.code == "response_too_large"


async def test_memory_replacing_a_record_counts_its_bytes_once():
    store = MemoryResponseStore()
    await store.put("t", record("resp_1", "a" * 100))
    await store.put("t", record("resp_1", "b"))
    assert len(store) == 1 and store.bytes_used == len(record("resp_1", "b").to_bytes())


async def test_redis_expiry_and_key_layout(redis_server):
    store = RedisResponseStore(redis_server.url, ttl_s=0.4, key_prefix="sy")
    try:
        await store.put("te{n}ant", record("resp_1"))
        keys = sorted(await store.redis.client.keys("*"))
        tag = b"{sy:te%7Bn%7Dant}"
        assert keys == [
            tag + b":response:resp_1",
            tag + b":responses",
            tag + b":responses:bytes",
            tag + b":responses:size",
        ]
        for key in keys:
            assert 0 < await store.redis.client.pttl(key) <= 400
        await asyncio.sleep(0.6)
        with pytest.raises(ResponseNotFound):
            await store.get("te{n}ant", "resp_1")
    finally:
        await store.aclose()


async def test_redis_unreachable_is_a_503():
    store = RedisResponseStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)
    try:
        for call in (store.get("t", "resp_1"), store.put("t", record()), store.delete("t", "resp_1")):
            with pytest.raises(GatewayError) as info:
                await call
            assert info.value.status == 503 and info.value.code == "response_store_unavailable"
    finally:
        await store.aclose()
