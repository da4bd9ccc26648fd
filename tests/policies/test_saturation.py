"""The one saturation definition: each threshold from both sides, and staleness."""

from __future__ import annotations

import pytest

from adapters.base import LoadSnapshot
from policies.saturation import DEFAULT_DETECTOR, Saturation, SaturationDetector

NOW = 1_000_000.0


def snapshot(age_s: float = 0.0, **kw) -> LoadSnapshot:
    return LoadSnapshot(read_at=NOW - age_s, **kw)


def test_defaults_are_five_waiting_eighty_percent_kv_and_five_seconds():
    assert (DEFAULT_DETECTOR.queue_depth, DEFAULT_DETECTOR.kv_cache_utilization, DEFAULT_DETECTOR.max_load_age_s) == (
        5,
        0.8,
        5.0,
    )


@pytest.mark.parametrize(("waiting", "expected"), [(4, Saturation.NONE), (5, Saturation.QUEUE_DEPTH)])
def test_queue_depth_threshold(waiting, expected):
    assert DEFAULT_DETECTOR.check(0, None, snapshot(waiting=waiting), NOW) is expected


@pytest.mark.parametrize(("kv", "expected"), [(0.79, Saturation.NONE), (0.8, Saturation.KV_CACHE)])
def test_kv_cache_threshold(kv, expected):
    assert DEFAULT_DETECTOR.check(0, None, snapshot(kv_usage=kv), NOW) is expected


@pytest.mark.parametrize(("inflight", "expected"), [(3, Saturation.NONE), (4, Saturation.MAX_INFLIGHT)])
def test_inflight_threshold(inflight, expected):
    assert DEFAULT_DETECTOR.check(inflight, 4, None, NOW) is expected


def test_no_max_inflight_means_no_inflight_limit():
    assert DEFAULT_DETECTOR.check(10_000, None, None, NOW) is Saturation.NONE


def test_thresholds_are_configurable():
    strict = SaturationDetector(queue_depth=2, kv_cache_utilization=0.5)
    assert strict.check(0, None, snapshot(waiting=2), NOW) is Saturation.QUEUE_DEPTH
    assert strict.check(0, None, snapshot(kv_usage=0.5), NOW) is Saturation.KV_CACHE
    assert DEFAULT_DETECTOR.check(0, None, snapshot(waiting=2, kv_usage=0.5), NOW) is Saturation.NONE


def test_unknown_signals_are_not_saturation():
    assert DEFAULT_DETECTOR.check(0, 4, snapshot(), NOW) is Saturation.NONE


@pytest.mark.parametrize(("age_s", "expected"), [(4.9, Saturation.KV_CACHE), (5.1, Saturation.NONE)])
def test_a_stale_snapshot_is_ignored(age_s, expected):
    assert DEFAULT_DETECTOR.check(0, 4, snapshot(age_s, kv_usage=0.99), NOW) is expected


def test_a_stale_snapshot_leaves_max_inflight_to_decide():
    stale = snapshot(60, waiting=50, kv_usage=0.99)
    assert DEFAULT_DETECTOR.check(4, 4, stale, NOW) is Saturation.MAX_INFLIGHT
    assert DEFAULT_DETECTOR.check(3, 4, stale, NOW) is Saturation.NONE


def test_fresh_returns_the_snapshot_or_nothing():
    young = snapshot(1)
    assert DEFAULT_DETECTOR.fresh(young, NOW) is young
    assert DEFAULT_DETECTOR.fresh(snapshot(6), NOW) is None
    assert DEFAULT_DETECTOR.fresh(None, NOW) is None
    assert SaturationDetector(max_load_age_s=10).fresh(snapshot(6), NOW) is not None


def test_the_runtime_signal_is_reported_before_the_inflight_limit():
    verdict = DEFAULT_DETECTOR.check(4, 4, snapshot(kv_usage=0.9), NOW)
    assert verdict is Saturation.KV_CACHE and verdict.reported_by_runtime and verdict.saturated
    at_limit = DEFAULT_DETECTOR.check(4, 4, snapshot(kv_usage=0.1), NOW)
    assert at_limit.saturated and not at_limit.reported_by_runtime
    assert not Saturation.NONE.saturated
