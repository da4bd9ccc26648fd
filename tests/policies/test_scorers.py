"""Each routing scorer alone, on hand-built views: scores in [0, 1], None where
there is no signal, and the blended profile's weights as documented."""

from __future__ import annotations

import pytest

from adapters.base import LoadSnapshot
from policies import scorers
from policies.profiles import PROFILES
from policies.saturation import SaturationDetector
from policies.views import BackendView

BLENDED = PROFILES["blended"].scorers

DETECTOR = SaturationDetector(queue_depth=5, kv_cache_utilization=0.8)


def test_queue_scores_the_distance_from_the_saturation_threshold():
    bs = [
        BackendView("idle", load=LoadSnapshot(waiting=0)),
        BackendView("some", load=LoadSnapshot(waiting=2)),
        BackendView("full", load=LoadSnapshot(waiting=9)),
        BackendView("silent", load=LoadSnapshot(running=3)),
        BackendView("unread"),
    ]
    assert scorers.queue(bs, DETECTOR) == [1.0, pytest.approx(0.6), 0.0, None, None]


def test_kv_scores_the_distance_from_the_saturation_threshold():
    bs = [
        BackendView("empty", load=LoadSnapshot(kv_usage=0.0)),
        BackendView("half", load=LoadSnapshot(kv_usage=0.4)),
        BackendView("over", load=LoadSnapshot(kv_usage=0.95)),
        BackendView("unread"),
    ]
    assert scorers.kv(bs, DETECTOR) == [1.0, pytest.approx(0.5), 0.0, None]


def test_inflight_is_a_ratio_to_the_least_loaded_per_unit_of_weight():
    bs = [
        BackendView("a", inflight=0),
        BackendView("b", inflight=1),
        BackendView("c", inflight=4),
        BackendView("big", inflight=4, weight=4),  # one request per unit of weight
    ]
    assert scorers.inflight(bs, DETECTOR) == [1.0, 0.5, 0.2, 0.5]
    # Scale-free: 10 against 20 weighs like 0 against 1, not like 0 against 10.
    assert scorers.inflight([BackendView("x", inflight=10), BackendView("y", inflight=20)], DETECTOR) == [
        1.0,
        pytest.approx(11 / 21),
    ]


def test_prefix_scorers_read_the_views_and_precise_wins_where_there_is_one():
    bs = [
        BackendView("both", prefix_approx=0.2, prefix_precise=0.9),
        BackendView("approx", prefix_approx=0.5),
        BackendView("none"),
    ]
    assert scorers.prefix_approx(bs, DETECTOR) == [0.2, 0.5, None]
    assert scorers.prefix_precise(bs, DETECTOR) == [0.9, None, None]
    assert scorers.prefix(bs, DETECTOR) == [0.9, 0.5, None]


def test_session_and_weight():
    bs = [BackendView("owner", session_owner=True, weight=2), BackendView("other", weight=1)]
    assert scorers.session(bs, DETECTOR) == [1.0, 0.0]
    assert scorers.weight(bs, DETECTOR) == [1.0, 0.5]


def test_every_scorer_stays_in_the_unit_interval():
    bs = [
        BackendView("a", inflight=7, weight=0.5, load=LoadSnapshot(waiting=-1, kv_usage=1.5)),
        BackendView("b", inflight=0, weight=3, load=LoadSnapshot(waiting=100, kv_usage=-0.2)),
        BackendView("c", prefix_approx=1.0, prefix_precise=0.0, session_owner=True),
    ]
    for name, scorer in scorers.SCORERS.items():
        for s in scorer(bs, DETECTOR):
            assert s is None or 0.0 <= s <= 1.0, name


def test_a_missing_signal_takes_the_mean_of_the_others():
    assert scorers.filled([1.0, None, 0.5]) == [1.0, 0.75, 0.5]
    assert scorers.filled([None, None]) == [0.0, 0.0]
    assert scorers.filled([0.3, 0.4]) == [0.3, 0.4]


def test_blended_session_outweighs_every_other_scorer_together():
    others = sum(w for name, w in BLENDED.items() if name != "session")
    assert BLENDED["session"] > others
    # The load signals together outweigh the prefix (prefix alone overloads hot replicas).
    load = BLENDED["queue"] + BLENDED["kv"] + BLENDED["inflight"]
    assert load > BLENDED["prefix"]
    assert set(BLENDED) <= set(scorers.SCORERS)


def test_a_total_is_the_weighted_sum_of_the_scores_from_zero():
    """RouteResult.scores reports these totals as they are, not only their order."""
    bs = [
        BackendView("idle", load=LoadSnapshot(waiting=0, kv_usage=0.4)),
        BackendView("some", load=LoadSnapshot(waiting=2)),
    ]
    totals = scorers.total_scores([("queue", 2.0), ("kv", 0.5)], bs, DETECTOR)
    assert totals == [pytest.approx(2.0 + 0.25), pytest.approx(1.2 + 0.25)]  # an unread kv takes the known mean
