"""The rollout stores (stores/rollout_memory.py, stores/rollout_redis.py): the same
semantics on both, Redis a real server: compare-and-set transitions, capped windows,
the judging lease, evidence, and a new rollout id replacing the old state."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace

import pytest

from policies.rollout_records import MirrorComparison, TrackRecord
from policies.rollout_state import Plan, act
from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_redis import RedisRolloutStore
from stores.rollout_store import COMPARISONS_MAX, EVIDENCE_MAX, RECORDS_MAX, RolloutStoreUnavailable


async def test_ensure_creates_a_pending_state_once(store):
    first = await store.ensure("m", "r1", 1.0)
    assert first.phase == "pending" and first.rollout_id == "r1"
    again = await store.ensure("m", "r1", 2.0)
    assert again == first
    assert await store.load("m") == first


async def test_a_new_rollout_id_replaces_the_state_with_a_later_version(store):
    plan = Plan(rollout_id="r1")
    state = await store.ensure("m", "r1", 1.0)
    moved, _ = act(plan, state, "start", 2.0)
    assert await store.swap("m", state.version, moved)
    fresh = await store.ensure("m", "r2", 3.0)
    assert fresh.rollout_id == "r2" and fresh.phase == "pending" and fresh.version > moved.version
    # a replica still acting on the old rollout cannot land its transition
    stale, _ = act(plan, moved, "promote", 4.0)
    assert not await store.swap("m", moved.version, stale)
    assert (await store.load("m")) == fresh


async def test_two_replicas_racing_apply_one_transition(store):
    plan = Plan(rollout_id="r1")
    state = await store.ensure("m", "r1", 1.0)
    a, _ = act(plan, state, "start", 2.0)
    b, _ = act(plan, state, "abort", 2.0)
    results = await asyncio.gather(store.swap("m", state.version, a), store.swap("m", state.version, b))
    assert sorted(results) == [False, True]
    stored = await store.load("m")
    assert stored == (a if results[0] else b)


async def test_windows_gather_every_replicas_records_and_are_capped(store):
    recs = [TrackRecord("stable", 1.0, ttft_s=0.1), TrackRecord("candidate", 1.5, failure="server_error")]
    await store.push("m", "r1", 7, 2.0, recs, [MirrorComparison(1.2, ("usage: prompt_tokens 3 != 2",))])
    await store.push("m", "r1", 7, 2.0, [TrackRecord("stable", 1.9)], [])
    got = await store.window("m", "r1", 7)
    assert sorted(r.at for r in got.records) == [1.0, 1.5, 1.9]
    assert recs[0] in got.records
    assert got.comparisons == [MirrorComparison(1.2, ("usage: prompt_tokens 3 != 2",))]
    assert (await store.window("m", "r1", 8)).records == []
    assert (await store.window("m", "other", 7)).records == []


async def test_a_flood_of_records_keeps_the_newest_cap(store):
    flood = [TrackRecord("candidate", float(i)) for i in range(RECORDS_MAX + 300)]
    for start in range(0, len(flood), 500):
        await store.push("m", "r1", 1, 2.0, flood[start : start + 500], [])
    mirror = [MirrorComparison(float(i), ("x" * 5000,) * 50) for i in range(COMPARISONS_MAX + 10)]
    await store.push("m", "r1", 1, 2.0, [], mirror)
    got = await store.window("m", "r1", 1)
    assert len(got.records) == RECORDS_MAX
    assert min(r.at for r in got.records) == 300.0  # the newest kept
    assert len(got.comparisons) == COMPARISONS_MAX
    assert all(len(m.differences) <= 8 and all(len(d) <= 200 for d in m.differences) for m in got.comparisons)


async def test_the_judging_lease_has_one_holder_until_it_expires(store):
    assert await store.lease("m", "a", 0.3)
    assert await store.lease("m", "a", 0.3)  # renewed by its holder
    assert not await store.lease("m", "b", 0.3)
    assert await store.lease("other", "b", 0.3)  # per model
    await asyncio.sleep(0.5)
    assert await store.lease("m", "b", 0.3)


async def test_evidence_is_kept_newest_first_and_capped(store):
    for i in range(EVIDENCE_MAX + 3):
        await store.put_evidence("m", "r1", {"window": i})
    kept = await store.evidence("m", "r1")
    assert [e["window"] for e in kept] == list(range(EVIDENCE_MAX + 2, 2, -1))
    assert await store.evidence("m", "r2") == []


async def test_memory_windows_expire(clock):
    store = MemoryRolloutStore(clock)
    await store.push("m", "r1", 1, 2.0, [TrackRecord("stable", 1.0)], [])
    clock.now += 2.0 * 4 + 61
    assert (await store.window("m", "r1", 1)).records == []


async def test_redis_window_lists_carry_a_ttl(redis_server):
    store = RedisRolloutStore(redis_server.url, key_prefix="t")
    await store.push("m", "r1", 1, 2.0, [TrackRecord("stable", 1.0)], [])
    key = store._list("m", "r1", 1, "stable")
    ttl = await store.redis.command("PTTL", key)
    assert 0 < ttl <= (2.0 * 4 + 60) * 1000
    await store.aclose()


async def test_a_hung_redis_is_unavailable_quickly_not_a_hang(redis_server):
    store = RedisRolloutStore(redis_server.url, key_prefix="t", timeout_s=0.3)
    await store.ensure("m", "r1", 1.0)
    os.kill(redis_server.child.pid, signal.SIGSTOP)
    try:
        with pytest.raises(RolloutStoreUnavailable):
            await asyncio.wait_for(store.load("m"), 10)
        with pytest.raises(RolloutStoreUnavailable):
            await asyncio.wait_for(store.push("m", "r1", 1, 2.0, [TrackRecord("stable", 1.0)], []), 10)
    finally:
        os.kill(redis_server.child.pid, signal.SIGCONT)
    await store.aclose()


async def test_a_stopped_redis_is_unavailable(redis_server):
    store = RedisRolloutStore(redis_server.url, key_prefix="t", timeout_s=0.3)
    redis_server.stop()
    with pytest.raises(RolloutStoreUnavailable):
        await store.ensure("m", "r1", 1.0)
    await store.aclose()


async def test_state_survives_in_redis_for_a_new_client(redis_server):
    plan = Plan(rollout_id="r1")
    a = RedisRolloutStore(redis_server.url, key_prefix="t")
    state = await a.ensure("m", "r1", 1.0)
    moved, _ = act(plan, state, "start", 2.0)
    moved = replace(moved, history=("hold:error_rate", "promote"))
    assert await a.swap("m", state.version, moved)
    await a.aclose()
    b = RedisRolloutStore(redis_server.url, key_prefix="t")
    assert await b.load("m") == moved
    assert await b.ensure("m", "r1", 3.0) == moved
    await b.aclose()


async def test_a_model_name_cannot_break_out_of_its_keys(store):
    await store.ensure("a}{b", "r1", 1.0)
    await store.push("a}{b", "r1", 1, 2.0, [TrackRecord("stable", 1.0)], [])
    assert await store.load("a") is None and await store.load("b") is None
    assert (await store.window("a", "r1", 1)).records == []
    assert len((await store.window("a}{b", "r1", 1)).records) == 1


async def test_a_full_redis_refuses_the_writes_as_unavailable(redis_server):
    store = RedisRolloutStore(redis_server.url, key_prefix="t", timeout_s=0.5)
    await store.ensure("m", "r1", 1.0)
    await store.redis.command("CONFIG", "SET", "maxmemory", "1")
    try:
        with pytest.raises(RolloutStoreUnavailable):
            await store.push("m", "r1", 1, 2.0, [TrackRecord("stable", 1.0)] * 50, [])
        with pytest.raises(RolloutStoreUnavailable):
            await store.ensure("m", "r2", 2.0)
    finally:
        await store.redis.command("CONFIG", "SET", "maxmemory", "0")
    assert (await store.load("m")).rollout_id == "r1"
    await store.aclose()
