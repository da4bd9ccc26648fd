"""What a mutation run of the rollout stores left open: a fresh state's version and time
(both stores); every field of a record and of a mirror comparison through a store, the
texts clipped at TEXT_MAX (at, below, above); and the memory store's clock boundaries: a
window's records live exactly `window_s * WINDOWS_KEPT + 60` seconds after its last push,
a lease exactly `ttl_s`."""

from __future__ import annotations

import pytest

from policies.rollout_records import MirrorComparison, TrackRecord
from policies.rollout_state import Plan, act
from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_store import TEXT_MAX, WINDOWS_KEPT


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
