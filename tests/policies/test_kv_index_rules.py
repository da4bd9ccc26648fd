"""The KV-event index's rules one at a time: events on other media skipped without
losing the rest of the batch, an unknown block's removal ignored, a configured
block size kept over the one events announce, sequence verdicts at their edges,
counters that count, the expiry boundary, the defaults, and the stats."""

from __future__ import annotations

from adapters.kv_events import BlockRemoved, BlockStored, KVEventBatch
from policies.kv_index import IndexStats, KVBlockIndex, KVIndexSettings, SeqVerdict
from tests.manual_clock import Clock


def batch(*events) -> KVEventBatch:
    return KVEventBatch(0.0, tuple(events))


def test_an_event_on_another_medium_is_skipped_and_the_rest_of_the_batch_applies():
    index = KVBlockIndex()
    index.apply(batch(BlockStored((1, 2), medium="CPU"), BlockStored((1, 2), medium="GPU")))
    assert index.match([1, 2]) == 2
    index.apply(batch(BlockRemoved((1,), medium="disk"), BlockRemoved((2,))))
    assert index.match([1]) == 1 and index.match([1, 2]) == 1


def test_removing_a_block_never_stored_is_ignored():
    index = KVBlockIndex()
    index.apply(batch(BlockStored((1,)), BlockRemoved((99,)), BlockStored((2,))))
    assert len(index) == 2


def test_the_block_size_is_learnt_from_events_unless_configured():
    learnt = KVBlockIndex()
    learnt.apply(batch(BlockStored((1,))))  # says nothing of its size
    assert learnt.block_size is None
    learnt.apply(batch(BlockStored((2,), block_size=16)))
    assert learnt.block_size == 16
    learnt.apply(batch(BlockStored((3,), block_size=8)))
    assert learnt.block_size == 16  # the largest seen
    configured = KVBlockIndex(KVIndexSettings(block_size=16))
    configured.apply(batch(BlockStored((1,), block_size=32)))
    assert configured.block_size == 16


def test_a_repeated_number_is_a_restart_and_a_skipped_one_a_gap():
    index = KVBlockIndex()
    assert index.receive(5, batch()) is SeqVerdict.NEXT
    assert index.verdict(6) is SeqVerdict.NEXT
    assert index.verdict(5) is SeqVerdict.RESTART
    assert index.verdict(4) is SeqVerdict.RESTART
    assert index.verdict(7) is SeqVerdict.GAP


def test_gaps_and_restarts_are_counted_each_time():
    index = KVBlockIndex()
    index.receive(0, batch())
    index.receive(2, batch())
    index.receive(4, batch())
    index.receive(1, batch())
    index.receive(0, batch())
    assert (index.gaps, index.restarts) == (2, 2)


def test_what_is_missing_before_a_number():
    index = KVBlockIndex()
    assert index.missing(3) == range(0, 3)
    index.receive(3, batch())
    assert index.missing(4) == range(0) and index.missing(7) == range(4, 7)
    assert list(index.missing(2)) == []


def test_a_block_exactly_max_age_old_still_matches():
    clock = Clock(0.0)
    index = KVBlockIndex(KVIndexSettings(max_age_s=10.0), clock=clock)
    index.apply(batch(BlockStored((1,))))
    clock.now = 10.0
    assert index.match([1]) == 1
    clock.now = 10.001
    assert index.match([1]) == 0


def test_the_defaults_are_half_an_hour_and_131072_blocks():
    clock = Clock(0.0)
    index = KVBlockIndex(clock=clock)
    index.apply(batch(BlockStored(tuple(range(131_073)))))
    assert len(index) == 131_072 and index.match([0]) == 0 and index.match([1]) == 1  # the oldest went
    clock.now = 1800.0
    assert index.match([1]) == 1
    clock.now = 1800.5
    assert index.match([1]) == 0


def test_an_index_of_one_block_is_allowed():
    index = KVBlockIndex(KVIndexSettings(max_blocks=1))
    index.apply(batch(BlockStored((1, 2))))
    assert len(index) == 1 and index.match([2]) == 1


def test_stats_report_what_the_index_holds():
    index = KVBlockIndex()
    index.receive(0, batch(BlockStored((1, 2), block_size=16)))
    index.receive(2, batch(BlockStored((3,))))
    assert index.stats() == IndexStats(blocks=1, last_seq=2, gaps=1, restarts=0, reconnects=0, block_size=16)


def test_a_reconnect_forgets_the_blocks_and_the_numbering():
    index = KVBlockIndex(KVIndexSettings(block_size=16))
    index.receive(4, KVEventBatch(0.0, (BlockStored((1, 2), None, 16),)))
    index.reconnected()
    assert (len(index), index.last_seq, index.reconnects) == (0, None, 1)
    assert index.missing(3) == range(0, 3)  # a replay may teach it what came before
    assert index.receive(3, KVEventBatch(0.0, (BlockStored((5,), None, 16),))) is SeqVerdict.NEXT
    assert (index.gaps, index.restarts, index.match([5])) == (0, 0, 1)


def test_reconnects_are_counted_each_time():
    # The count feeds switchyard_kv_events_lost_total{kind="reconnect"}: a flapping
    # publisher must show as many reconnects as happened, not one.
    index = KVBlockIndex(KVIndexSettings(block_size=16))
    for _ in range(3):
        index.reconnected()
    assert index.stats().reconnects == 3
