"""What a mutation run of the rollout stores left open: a fresh state's version and time
(both stores); every field of a record and of a mirror comparison through a store, the
texts clipped at TEXT_MAX (at, below, above); and the memory store's clock boundaries: a
window's records live exactly `window_s * WINDOWS_KEPT + 60` seconds after its last push,
a lease exactly `ttl_s`; the Redis store's keys, TTLs, options and outage message."""

from __future__ import annotations

import pytest

from policies.rollout_records import MirrorComparison, TrackRecord
from policies.rollout_state import Plan, act
from stores.redis_connect import hash_tag
from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_redis import RedisRolloutStore
from stores.rollout_store import RECORDS_MAX, TEXT_MAX, WINDOWS_KEPT, RolloutStoreUnavailable


async def test_a_fresh_state_starts_at_version_0_stamped_now_and_a_new_rollout_adds_one(store):
    first = await store.ensure("m", "r1", 5.0)
    assert (first.version, first.updated_at) == (0, 5.0)
    moved, _ = act(Plan(rollout_id="r1"), first, "start", 6.0)
    assert await store.swap("m", first.version, moved)
    fresh = await store.ensure("m", "r2", 7.0)
    assert (fresh.version, fresh.updated_at, fresh.phase) == (moved.version + 1, 7.0, "pending")


async def test_a_memory_window_lives_its_span_after_the_last_push_and_not_one_instant_more(clock):
    store = MemoryRolloutStore(clock)
    window_s = 2.0
    span = window_s * WINDOWS_KEPT + 60
    await store.push("m", "r1", 1, window_s, [TrackRecord("stable", 1.0)], [])
    clock.now += span - 0.001
    assert len((await store.window("m", "r1", 1)).records) == 1
    await store.push("m", "r1", 1, window_s, [TrackRecord("stable", 2.0)], [])  # renews the span
    pushed_at = clock.now
    clock.now = pushed_at + span - 0.001
    assert [r.at for r in (await store.window("m", "r1", 1)).records] == [1.0, 2.0]
    clock.now = pushed_at + span
    assert (await store.window("m", "r1", 1)).records == []


async def test_a_memory_lease_is_held_until_its_ttl_and_free_at_it(clock):
    store = MemoryRolloutStore(clock)
    assert await store.lease("m", "a", 0.5)
    clock.now += 0.25
    assert not await store.lease("m", "b", 0.5)
    clock.now = 1000.0 + 0.5
    assert await store.lease("m", "b", 0.5)


async def test_every_field_of_a_record_and_a_comparison_comes_back_from_the_store(store):
    record = TrackRecord("candidate", 1.5, "timeout", 0.25, 0.03, "length", True, False, 41, 7)
    other = TrackRecord("candidate", 1.6, None, None, None, None, False, True, 3, 0)
    comparison = MirrorComparison(1.2, ("finish_reason: stop != length",), "overload", "server_error")
    await store.push("m", "r1", 1, 2.0, [record, other], [comparison, MirrorComparison(1.3)])
    got = await store.window("m", "r1", 1)
    assert got.records == [record, other]
    assert got.comparisons == [comparison, MirrorComparison(1.3)]


@pytest.mark.parametrize("length", [TEXT_MAX - 1, TEXT_MAX, TEXT_MAX + 1])
async def test_a_failure_or_finish_text_is_clipped_at_text_max(store, length):
    text = "f" * length
    kept = text[:TEXT_MAX]
    await store.push(
        "m",
        "r1",
        1,
        2.0,
        [TrackRecord("stable", 1.0, text, finish_reason=text)],
        [MirrorComparison(1.0, (text,), text, text)],
    )
    got = await store.window("m", "r1", 1)
    assert (got.records[0].failure, got.records[0].finish_reason) == (kept, kept)
    m = got.comparisons[0]
    assert (m.differences, m.stable_failure, m.candidate_failure) == ((kept,), kept, kept)


async def test_one_push_keeps_each_tracks_newest_cap_however_the_tracks_interleave(store):
    # a replica's buffer holds up to 4 * RECORDS_MAX records: the few candidate records of
    # a push flooded by stable ones are kept, as the stable track's newest RECORDS_MAX are
    few = [TrackRecord("candidate", float(i)) for i in range(10)]
    flood = [TrackRecord("stable", 100.0 + i) for i in range(2 * RECORDS_MAX + 5)]
    await store.push("m", "r1", 1, 2.0, few + flood, [])
    got = (await store.window("m", "r1", 1)).records
    assert [r.at for r in got if r.track == "candidate"] == [r.at for r in few]
    assert [r.at for r in got if r.track == "stable"] == [r.at for r in flood[-RECORDS_MAX:]]


async def test_the_redis_keys_are_the_documented_layout_under_the_default_prefix(redis_server):
    store = RedisRolloutStore(redis_server.url)
    try:
        await store.ensure("m", "r1", 1.0)
        await store.push("m", "r1", 3, 2.0, [TrackRecord("stable", 1.0)], [MirrorComparison(1.0)])
        await store.lease("m", "a", 5.0)
        await store.put_evidence("m", "r1", {"window": 3})
        keys = sorted(k.decode() for k in await store.redis.command("KEYS", "*"))
        tag = "{switchyard:rollout:m}"
        assert keys == sorted(f"{tag}:{k}" for k in ("state", "lease", "r1:w:3:stable", "r1:w:3:mirror", "r1:evidence"))
    finally:
        await store.aclose()


async def test_the_window_lists_live_their_span_and_the_lease_its_ttl_in_redis(redis_server):
    store = RedisRolloutStore(redis_server.url, key_prefix="t")
    try:
        span_ms = (2.0 * WINDOWS_KEPT + 60) * 1000
        await store.push("m", "r1", 1, 2.0, [TrackRecord("stable", 1.0)], [])
        assert span_ms - 2000 < await store.redis.command("PTTL", store._list("m", "r1", 1, "stable")) <= span_ms
        await store.lease("m", "a", 100.0)
        assert 98_000 < await store.redis.command("PTTL", hash_tag("t:rollout", "m") + ":lease") <= 100_000
    finally:
        await store.aclose()


def test_the_connection_options_reach_the_connection():
    assert RedisRolloutStore("redis://127.0.0.1:9", timeout_s=7.5).redis.pool_wait_s == 7.5


async def test_unavailable_says_what_redis_answered(redis_server):
    store = RedisRolloutStore(redis_server.url, key_prefix="t", timeout_s=0.3)
    redis_server.stop()
    try:
        for call in (store.ensure("m", "r1", 1.0), store.load("m")):
            with pytest.raises(RolloutStoreUnavailable) as info:
                await call
            assert str(info.value) == str(info.value.__cause__) and str(info.value) not in ("", "None")
    finally:
        await store.aclose()
