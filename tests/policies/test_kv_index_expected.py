"""Expected blocks in the KV-event index: what a routed request will make its runtime
store matches at once, and only until the runtime confirms, removes or clears it, a
gap or restart resets the index, or its TTL passes; bounded, and per index."""

from __future__ import annotations

import pytest

from adapters.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
from policies.kv_index import KVBlockIndex, KVIndexSettings, SeqVerdict, match_fraction
from tests.manual_clock import Clock


def batch(*events) -> KVEventBatch:
    return KVEventBatch(0.0, tuple(events))


def stored(*hashes: int) -> BlockStored:
    return BlockStored(tuple(hashes), None, 16, "GPU")


@pytest.fixture
def clock() -> Clock:
    return Clock(1000.0)


def index(clock: Clock, **kw) -> KVBlockIndex:
    return KVBlockIndex(KVIndexSettings(**kw), clock=clock)


def test_expected_blocks_match_at_once_and_only_their_own_prefix(clock):
    idx = index(clock)
    assert idx.match([1, 2, 3]) == 0
    idx.expect([1, 2, 3])
    assert idx.match([1, 2, 3, 4]) == 3 and idx.match([2, 3]) == 2 and idx.match([9, 1]) == 0
    assert idx.stats().expected == 3 and len(idx) == 0  # expected, not stored


def test_an_expected_block_never_confirmed_expires(clock):
    idx = index(clock)
    idx.expect([1, 2])
    clock.now += 4.9
    assert idx.match([1, 2]) == 2
    clock.now += 0.1
    assert idx.match([1, 2]) == 0
    # And is dropped from memory by the next expectation, not only ignored.
    idx.expect([7])
    assert idx.stats().expected == 1 and idx.match([7]) == 1


def test_a_confirmation_makes_it_a_stored_block_that_outlives_the_ttl(clock):
    idx = index(clock)
    idx.expect([1, 2, 3])
    idx.apply(batch(stored(1, 2)))  # the runtime computed the first two blocks
    assert idx.stats().expected == 1 and len(idx) == 2
    clock.now += 60
    assert idx.match([1, 2, 3]) == 2  # block 3 was never confirmed: expired; 1 and 2 are stored


def test_a_block_removed_or_cleared_is_expected_no_more(clock):
    idx = index(clock)
    idx.expect([1, 2, 3])
    idx.apply(batch(BlockRemoved((2,), "GPU")))
    assert idx.match([1, 2, 3]) == 1 and idx.stats().expected == 2
    idx.apply(batch(AllBlocksCleared()))
    assert idx.match([1, 2, 3]) == 0 and idx.stats().expected == 0
    # A removal of a block offloaded elsewhere is not about the device's copy: it stays.
    idx.expect([5])
    idx.apply(batch(BlockRemoved((5,), "CPU")))
    assert idx.match([5]) == 1


@pytest.mark.parametrize("seq", [5, 0])  # a gap after 1, a restart
def test_a_gap_or_a_restart_forgets_the_expected_blocks_too(clock, seq):
    idx = index(clock)
    assert idx.receive(0, batch(stored(10))) is SeqVerdict.NEXT
    assert idx.receive(1, batch()) is SeqVerdict.NEXT
    idx.expect([1, 2, 3])
    verdict = idx.receive(seq, batch(stored(20)))
    assert verdict in (SeqVerdict.GAP, SeqVerdict.RESTART)
    assert idx.stats().expected == 0 and idx.match([1]) == 0 and idx.match([10]) == 0 and idx.match([20]) == 1


def test_expected_blocks_are_bounded_oldest_dropped_first(clock):
    idx = index(clock, max_blocks=4)
    idx.expect([1, 2, 3])
    clock.now += 1
    idx.expect([4, 5, 6])
    assert idx.stats().expected == 4
    assert idx.match([4, 5, 6]) == 3 and idx.match([1]) == 0 and idx.match([3]) == 1
    # Re-expecting renews: 3 is now the newest, 4 the oldest.
    idx.expect([3])
    idx.expect([7])
    assert idx.match([3]) == 1 and idx.match([4]) == 0 and idx.stats().expected == 4


def test_another_backends_events_never_touch_this_ones_expected_blocks(clock):
    a, b = index(clock), index(clock)
    a.expect([1, 2, 3])
    b.apply(batch(stored(1), BlockRemoved((2,), "GPU"), AllBlocksCleared()))
    b.receive(0, batch())
    b.receive(9, batch())  # a gap on b
    assert a.match([1, 2, 3]) == 3 and a.stats().expected == 3
    assert b.match([1, 2, 3]) == 0


def test_a_stored_block_is_not_expected_and_keeps_its_own_age(clock):
    idx = index(clock, max_age_s=10.0)
    idx.apply(batch(stored(1)))
    clock.now += 8
    idx.expect([1, 2])  # 1 is held: only 2 is expected, and 1 is not renewed by a guess
    assert idx.stats().expected == 1
    assert idx.match([1, 2]) == 2
    clock.now += 3  # 1 is older than max_age_s now (its runtime did not announce it again)
    assert idx.match([1, 2]) == 0  # a routed request does not vouch for what only the runtime can


def test_a_zero_ttl_expects_nothing_and_a_negative_one_is_refused(clock):
    idx = index(clock, expect_ttl_s=0.0)
    idx.expect([1, 2])
    assert idx.match([1, 2]) == 0 and idx.stats().expected == 0
    with pytest.raises(ValueError):
        index(clock, expect_ttl_s=-1.0)


def test_a_match_shorter_than_the_template_head_scores_nothing():
    assert match_fraction(1, 100) == 0.0 and match_fraction(3, 100) == 0.0  # the head every chat shares
    assert match_fraction(4, 100) == 0.04 and match_fraction(95, 100) == 0.95
    assert match_fraction(2, 2) == 1.0 and match_fraction(1, 2) == 0.0  # a short prompt: all of it, or nothing
    assert match_fraction(1, 1) == 1.0 and match_fraction(0, 1) == 0.0  # a one-block prompt is a short prompt too
    assert match_fraction(0, 0) == 0.0 and match_fraction(1, 100, min_blocks=1) == 0.01


def test_the_default_ttl_is_five_seconds(clock):
    idx = KVBlockIndex(clock=clock)
    idx.expect([1, 2])
    clock.now += 4.99
    assert idx.match([1, 2]) == 2
    clock.now += 0.02
    assert idx.match([1, 2]) == 0


def test_a_ttl_under_a_second_still_expects(clock):
    idx = index(clock, expect_ttl_s=0.5)
    idx.expect([1, 2])
    assert idx.match([1, 2]) == 2
    clock.now += 0.6
    assert idx.match([1, 2]) == 0


def test_expiry_drops_only_the_expired_expectations(clock):
    idx = index(clock)  # 5 s
    idx.expect([1])  # until 1005
    clock.now += 4.0
    idx.expect([2])  # until 1009
    clock.now += 2.0  # 1006: the first has expired, the second has not
    idx.expect([3])
    assert idx.match([1]) == 0 and idx.match([2]) == 1 and idx.match([3]) == 1
    assert idx.stats().expected == 2
