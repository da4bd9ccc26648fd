"""The response store's per-tenant share at its boundaries, memory and a real
redis-server: a tenant may hold exactly `tenant_max_entries` records and exactly
`tenant_max_bytes` bytes (nothing of its own pushed out), one more record or one more
byte pushes out its oldest; a single record of exactly the share is stored, one byte
over is a 413."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.store import ResponseNotFound
from gateway.openai.responses.store_memory import MemoryResponseStore
from gateway.openai.responses.store_redis import RedisResponseStore
from tests.gateway.openai.responses.test_store import record

SIZE = len(record("resp_0", "x" * 1000).to_bytes())  # every resp_<digit> record with 1,000 x's


@pytest.fixture(params=["memory", "redis"])
def make_store(request):
    def make(**share):
        if request.param == "memory":
            return MemoryResponseStore(**share)
        return RedisResponseStore(request.getfixturevalue("redis_server").url, **share)

    return make


async def kept(store, tenant: str, ids: list[str]) -> list[str]:
    out = []
    for rid in ids:
        try:
            out.append((await store.get(tenant, rid)).id)
        except ResponseNotFound:
            pass
    return out


@pytest.mark.parametrize(("puts", "first_kept"), [(2, True), (3, True), (4, False)])
async def test_a_tenant_holds_exactly_its_entries(make_store, puts, first_kept) -> None:
    store = make_store(tenant_max_entries=3)
    try:
        ids = [f"resp_{i}" for i in range(puts)]
        for rid in ids:
            await store.put("a", record(rid, "x" * 1000))
        assert await kept(store, "a", ids) == ids[-3:]
        assert ("resp_0" in await kept(store, "a", ids)) is first_kept
    finally:
        await store.aclose()


@pytest.mark.parametrize(("share", "both_kept"), [(2 * SIZE, True), (2 * SIZE + 1, True), (2 * SIZE - 1, False)])
async def test_a_tenant_holds_exactly_its_bytes(make_store, share, both_kept) -> None:
    store = make_store(tenant_max_bytes=share)
    try:
        await store.put("a", record("resp_1", "x" * 1000))
        await store.put("a", record("resp_2", "x" * 1000))
        assert await kept(store, "a", ["resp_1", "resp_2"]) == (["resp_1", "resp_2"] if both_kept else ["resp_2"])
    finally:
        await store.aclose()


@pytest.mark.parametrize(("over", "stored"), [(-1, True), (0, True), (1, False)])
async def test_one_record_may_be_the_whole_share_and_not_one_byte_more(make_store, over, stored) -> None:
    store = make_store(tenant_max_bytes=SIZE * 2)
    big = record("resp_9", "x" * (1000 + SIZE + over))  # SIZE * 2 + over bytes
    assert len(big.to_bytes()) == SIZE * 2 + over
    try:
        if stored:
            await store.put("a", big)
            assert (await store.get("a", "resp_9")).id == "resp_9"
        else:
            with pytest.raises(GatewayError) as info:
                await store.put("a", big)
            assert (info.value.status, info.value.code) == (413, "response_too_large")
    finally:
        await store.aclose()
