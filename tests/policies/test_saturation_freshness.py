"""How old a runtime's load report may be before saturation stops trusting it:
up to and including `max_load_age_s`, measured against the wall clock when the
caller gives no time."""

from __future__ import annotations

import time

from adapters.base import LoadSnapshot
from policies.saturation import Saturation, SaturationDetector


def test_a_load_exactly_max_age_old_is_still_trusted():
    detector = SaturationDetector(max_load_age_s=5.0)
    load = LoadSnapshot(waiting=50, read_at=100.0)
    assert detector.fresh(load, now=105.0) is load
    assert detector.check(0, None, load, now=105.0) is Saturation.QUEUE_DEPTH
    assert detector.fresh(load, now=105.01) is None


def test_without_a_time_the_wall_clock_judges_freshness():
    detector = SaturationDetector(max_load_age_s=5.0)
    recent = LoadSnapshot(kv_usage=0.95, read_at=time.time())
    stale = LoadSnapshot(kv_usage=0.95, read_at=time.time() - 60)
    assert detector.fresh(recent) is recent
    assert detector.check(0, None, recent) is Saturation.KV_CACHE
    assert detector.fresh(stale) is None
    assert detector.check(0, None, stale) is Saturation.NONE
