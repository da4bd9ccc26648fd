"""What a mutation run of policies/ejection.py left open: two failing tenants are witness
enough even while a third is served; the tenant window's edge (a failure or a success
exactly `window_s` ago no longer counts); the tenants remembered at and past their cap;
ejections counted per reason; what /readyz shows at a given time."""

from __future__ import annotations

from policies.ejection import MAX_TENANTS_SEEN, EjectionConfig, FailureKind, OutlierDetector, _Backend, _Window
from tests.manual_clock import Clock

ERR = FailureKind.SERVER_ERROR


def detector(**cfg: object) -> tuple[OutlierDetector, Clock]:
    clock = Clock(100.0)
    config = EjectionConfig(consecutive_failures=3, min_requests=6, **cfg)  # type: ignore[arg-type]
    return OutlierDetector(["b"], config, clock), clock


def test_two_failing_tenants_are_witness_enough_while_a_third_is_served():
    b = _Backend(_Window(10.0), failed={"a": 100.0, "v": 100.0}, served={"c": 100.0})
    assert b.witnessed(100.0, 10.0)


def test_a_failure_or_success_exactly_a_window_ago_no_longer_counts():
    assert _Backend(_Window(10.0), failed={"a": 90.0, "v": 100.0}, served={"c": 100.0}).witnessed(100.0, 10.0) is False
    assert _Backend(_Window(10.0), failed={"a": 100.0}, served={"c": 90.0}).witnessed(100.0, 10.0) is True
    assert _Backend(_Window(10.0), failed={"a": 100.0}, served={"c": 90.001}).witnessed(100.0, 10.0) is False


def test_the_tenants_remembered_are_the_most_recent_up_to_the_cap():
    d, clock = detector()
    for i in range(MAX_TENANTS_SEEN):
        d.record_success("b", tenant=f"t{i}")
    served = d._backends["b"].served
    assert len(served) == MAX_TENANTS_SEEN and "t0" in served  # at the cap: all kept
    d.record_success("b", tenant="t0")  # seen again: the most recent now
    d.record_success("b", tenant="new")
    assert len(served) == MAX_TENANTS_SEEN and "t0" in served and "t1" not in served


def test_ejections_are_counted_per_reason_and_each_starts_a_fresh_count():
    d, clock = detector(base_ejection_s=1.0)
    for _ in range(3):
        d.record_failure("b", ERR)
    assert d._backends["b"].consecutive == 0
    clock.now += 5
    assert not d.is_ejected("b")  # the half-open probe
    d.record_success("b")  # closes the circuit
    for _ in range(3):
        change = d.record_failure("b", ERR)
    assert change is not None and d.ejections("b") == {"consecutive_failures": 2}


def test_readyz_shows_the_time_left_at_the_time_asked_to_the_millisecond():
    d, clock = detector(base_ejection_s=2.0)
    for _ in range(3):
        d.record_failure("b", ERR)
    assert d.describe("b", now=100.5) == {"circuit": "open", "reason": "consecutive_failures", "ejected_for_s": 1.5}
    assert d.describe("b", now=101.9996)["ejected_for_s"] == 0.0  # rounded to 3 places
    assert d.describe("b", now=101.0004)["ejected_for_s"] == 1.0
    assert d.describe("b", now=101.25)["ejected_for_s"] == 0.75
    assert d.describe("b", now=102.5) == {
        "circuit": "half_open",
        "reason": "consecutive_failures",
        "ejected_for_s": 0.0,
    }
