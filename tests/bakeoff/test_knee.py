"""The knee search on scripted attainment functions (pure), and the Wilson decisions."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bakeoff.knee import KneeSearch, Probe, decide, wilson_interval


def _search(attained: Callable[[float], float], n: int = 200, **kw: float) -> KneeSearch:
    """Run a search where a probe at rate r has round(n * attained(r)) good of n."""
    s = KneeSearch(start_rate=kw.pop("start", 1.0), max_rate=kw.pop("max_rate", 256.0), **kw)  # type: ignore[arg-type]
    while (rate := s.next_rate()) is not None:
        good = round(n * attained(rate))
        s.record(Probe(rate, decide(good, n, 0.9, 0.95), good, n, wilson_interval(good, n, 0.95)))
    return s


def test_wilson_interval_matches_the_formula() -> None:
    lo, hi = wilson_interval(30, 30, 0.95)
    assert lo == pytest.approx(0.8865, abs=1e-3) and hi == pytest.approx(1.0)
    lo, hi = wilson_interval(50, 100, 0.95)
    assert (lo, hi) == pytest.approx((0.4038, 0.5962), abs=1e-3)
    assert wilson_interval(0, 0, 0.95) == (0.0, 1.0)


def test_decisions_pass_fail_and_undetermined() -> None:
    assert decide(200, 200, 0.9, 0.95) == "pass"
    assert decide(100, 200, 0.9, 0.95) == "fail"
    # 19 of 20 is 95% attained, but twenty requests cannot show 90% at 95% confidence
    assert decide(19, 20, 0.9, 0.95) == "undetermined"
    assert decide(0, 0, 0.9, 0.95) == "undetermined"


def test_the_knee_is_bracketed_within_the_tolerance() -> None:
    s = _search(lambda r: 1.0 if r <= 10 else 0.5, tolerance=0.1, max_probes=20)
    assert s.stop_reason == "converged"
    knee, above = s.best_pass, s.lowest_non_pass
    assert knee is not None and above is not None
    assert knee <= 10 < above and above / knee <= 1.1


def test_a_candidate_failing_at_the_start_rate_has_no_knee() -> None:
    s = _search(lambda r: 0.2)
    assert s.best_pass is None and s.stop_reason == "fails_at_start" and len(s.probes) == 1


def test_the_search_stops_at_max_rate_when_everything_passes() -> None:
    s = _search(lambda r: 1.0, max_rate=16.0)
    assert s.best_pass == 16.0 and s.stop_reason == "max_rate_reached"
    assert [p.rate for p in s.probes] == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_max_probes_bounds_the_search() -> None:
    s = _search(lambda r: 1.0 if r <= 10 else 0.0, tolerance=0.001, max_probes=6)
    assert len(s.probes) == 6 and s.stop_reason == "max_probes"


def test_an_undetermined_probe_bounds_the_knee_from_above() -> None:
    # at 90% attained on 200 requests the interval straddles the 90% target
    s = _search(lambda r: 1.0 if r <= 4 else 0.9, tolerance=0.1, max_probes=20)
    assert any(p.verdict == "undetermined" for p in s.probes)
    assert s.best_pass is not None and s.best_pass <= 4


def test_bad_search_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        KneeSearch(start_rate=0, max_rate=10)
    with pytest.raises(ValueError):
        KneeSearch(start_rate=1, max_rate=10, growth=1.0)
