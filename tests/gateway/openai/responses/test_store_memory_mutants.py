"""gateway/openai/responses/store_memory.py's boundaries on a scripted clock: a record
lives until exactly its expiry (gone at it), the whole store's bytes and entries at,
below and above their limits, a too large record's 413 naming its size and the limit,
a miss naming the id asked for, and a tenant's share dropped with its last record."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.store import ResponseNotFound
from gateway.openai.responses.store_memory import MemoryResponseStore
from tests.gateway.openai.responses.test_store import record

SIZE = len(record("resp_0", "x" * 100).to_bytes())  # every resp_<digit> record with 100 x's


def store_at(clock: list[float], **limits) -> MemoryResponseStore:
    return MemoryResponseStore(clock=lambda: clock[0], **limits)


async def held(store: MemoryResponseStore, tenant: str, *ids: str) -> list[str]:
    """Which of `ids` `tenant` can read back."""
    found = []
    for response_id in ids:
        try:
            found.append((await store.get(tenant, response_id)).id)
        except ResponseNotFound:
            pass
    return found


async def test_a_record_lives_until_its_expiry_and_is_gone_at_it():
    clock = [100.0]
    store = store_at(clock, ttl_s=10)
    await store.put("a", record("resp_1", "x" * 100))
    clock[0] = 109.999
    assert (await store.get("a", "resp_1")).id == "resp_1"
    clock[0] = 110.0
    with pytest.raises(ResponseNotFound) as info:
        await store.get("a", "resp_1")
    assert info.value.args == ("resp_1",)
    assert len(store) == 0 and store.bytes_used == 0


async def test_deleting_at_the_expiry_is_a_miss_and_just_before_it_works():
    clock = [0.0]
    store = store_at(clock, ttl_s=10)
    await store.put("a", record("resp_1", "x" * 100))
    await store.put("a", record("resp_2", "x" * 100))
    clock[0] = 9.5
    await store.delete("a", "resp_1")
    clock[0] = 10.0
    with pytest.raises(ResponseNotFound) as info:
        await store.delete("a", "resp_2")
    assert info.value.args == ("resp_2",)
    with pytest.raises(ResponseNotFound):
        await store.delete("b", "resp_2")
    assert await held(store, "a", "resp_1", "resp_2") == [] and len(store) == 0


async def test_expired_records_make_room_exactly_at_their_expiry():
    clock = [0.0]
    store = store_at(clock, ttl_s=10, tenant_max_entries=1)
    await store.put("a", record("resp_1", "x" * 100))
    clock[0] = 10.0
    await store.put("a", record("resp_2", "x" * 100))
    assert await held(store, "a", "resp_1", "resp_2") == ["resp_2"]
    assert len(store) == 1 and store.bytes_used == SIZE


@pytest.mark.parametrize(("max_bytes", "first_kept"), [(2 * SIZE, True), (2 * SIZE + 1, True), (2 * SIZE - 1, False)])
async def test_the_whole_store_holds_exactly_its_bytes(max_bytes, first_kept):
    store = MemoryResponseStore(max_bytes=max_bytes)
    await store.put("a", record("resp_1", "x" * 100))
    await store.put("a", record("resp_2", "x" * 100))
    assert await held(store, "a", "resp_1", "resp_2") == (["resp_1", "resp_2"] if first_kept else ["resp_2"])
    assert store.bytes_used == (2 if first_kept else 1) * SIZE


@pytest.mark.parametrize(("max_entries", "kept"), [(2, 2), (3, 2), (1, 1)])
async def test_the_whole_store_holds_exactly_its_entries(max_entries, kept):
    store = MemoryResponseStore(max_entries=max_entries)
    await store.put("a", record("resp_1", "x" * 100))
    await store.put("a", record("resp_2", "x" * 100))
    assert len(store) == kept and await held(store, "a", "resp_1", "resp_2") == ["resp_1", "resp_2"][2 - kept :]


async def test_a_full_store_refuses_a_tenant_with_nothing_of_its_own_and_keeps_no_share_for_it():
    store = MemoryResponseStore(max_entries=1)
    await store.put("a", record("resp_1", "x" * 100))
    with pytest.raises(GatewayError) as info:
        await store.put("b", record("resp_2", "x" * 100))
    assert info.value.code == "response_store_full"
    assert await held(store, "b", "resp_2") == [] and "b" not in store._shares
    assert (await store.get("a", "resp_1")).id == "resp_1"


async def test_a_record_larger_than_a_share_is_a_413_naming_its_size_and_the_limit():
    store = MemoryResponseStore(tenant_max_bytes=SIZE - 1, max_bytes=10 * SIZE)
    assert store.max_record_bytes == SIZE - 1
    with pytest.raises(GatewayError) as info:
        await store.put("a", record("resp_1", "x" * 100))
    assert info.value.status == 413
    assert f"at least {SIZE} bytes" in info.value.message and f"more than the {SIZE - 1} " in info.value.message
    await MemoryResponseStore(tenant_max_bytes=SIZE).put("a", record("resp_1", "x" * 100))


async def test_a_tenant_without_records_has_no_share_left():
    clock = [0.0]
    store = store_at(clock, ttl_s=10)
    await store.put("a", record("resp_1", "x" * 100))
    await store.put("a", record("resp_1", "x" * 100))  # the same id again replaces it
    assert await held(store, "a", "resp_1") == ["resp_1"] and len(store) == 1 and store.bytes_used == SIZE
    await store.delete("a", "resp_1")
    assert "a" not in store._shares
    await store.put("b", record("resp_2", "x" * 100))
    clock[0] = 10.0
    with pytest.raises(ResponseNotFound):
        await store.get("b", "resp_2")
    assert "b" not in store._shares
    await store.put("c", record("resp_3", "x" * 100))
    clock[0] = 20.0
    await store.put("c", record("resp_4", "x" * 100))  # its expired record goes first
    assert list(store._shares) == ["c"] and await held(store, "c", "resp_3", "resp_4") == ["resp_4"]
    assert store.bytes_used == SIZE


async def test_a_full_store_expires_every_tenants_old_records_first():
    clock = [0.0]
    store = store_at(clock, ttl_s=10, max_entries=1)
    await store.put("a", record("resp_1", "x" * 100))
    clock[0] = 10.0
    await store.put("b", record("resp_2", "x" * 100))
    assert list(store._shares) == ["b"] and len(store) == 1


async def test_a_tenant_that_gave_up_all_its_records_and_still_does_not_fit_is_refused_cleanly():
    store = MemoryResponseStore(max_bytes=2 * SIZE)
    await store.put("b", record("resp_1", "x" * 100))
    await store.put("a", record("resp_2", "x" * 100))
    with pytest.raises(GatewayError) as info:
        await store.put("a", record("resp_3", "x" * 150))  # its own record goes, and it still does not fit
    assert info.value.code == "response_store_full"
    assert await held(store, "a", "resp_2", "resp_3") == [] and "a" not in store._shares
    assert await held(store, "b", "resp_1") == ["resp_1"] and store.bytes_used == SIZE


async def test_a_share_gets_its_bytes_back_from_a_replaced_a_deleted_and_an_expired_record():
    # A share of two records' bytes keeps two whatever went before: a count left behind by
    # any of the three ways a record goes would push out a record the tenant still has room for.
    clock = [0.0]
    store = store_at(clock, ttl_s=10, tenant_max_bytes=2 * SIZE)
    await store.put("a", record("resp_1", "x" * 100))
    await store.put("a", record("resp_1", "x" * 100))  # replaced
    await store.put("a", record("resp_2", "x" * 100))
    assert await held(store, "a", "resp_1", "resp_2") == ["resp_1", "resp_2"]
    await store.delete("a", "resp_1")
    await store.put("a", record("resp_3", "x" * 100))
    assert await held(store, "a", "resp_2", "resp_3") == ["resp_2", "resp_3"]
    clock[0] = 10.0  # both expire
    await store.put("a", record("resp_4", "x" * 100))
    await store.put("a", record("resp_5", "x" * 100))
    assert await held(store, "a", "resp_4", "resp_5") == ["resp_4", "resp_5"]
