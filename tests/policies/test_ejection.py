"""Outlier ejection and circuit breaking, alone, on an injected clock."""

from __future__ import annotations

from policies.ejection import CircuitState, EjectionConfig, FailureKind, OutlierDetector, Transition
from tests.manual_clock import Clock

CONNECT = FailureKind.CONNECT


def detector(n=4, **cfg) -> tuple[OutlierDetector, Clock]:
    clock = Clock(100.0)
    return OutlierDetector([f"b{i}" for i in range(n)], EjectionConfig(**cfg), clock), clock


def fail(d: OutlierDetector, backend: str, times: int, kind=CONNECT) -> list[Transition | None]:
    return [d.record_failure(backend, kind) for _ in range(times)]


def test_consecutive_failures_eject():
    d, _ = detector(consecutive_failures=3, base_ejection_s=5)
    assert fail(d, "b0", 2) == [None, None]
    assert not d.is_ejected("b0")
    (t,) = fail(d, "b0", 1)
    assert t == Transition("b0", CircuitState.OPEN, "consecutive_failures", 5.0)
    assert t.describe() == "backend b0 ejected for 5s (consecutive_failures)"
    assert d.is_ejected("b0") and d.state("b0") is CircuitState.OPEN and not d.admits("b0")
    assert not d.is_ejected("b1")


def test_a_success_resets_the_consecutive_count():
    d, _ = detector(consecutive_failures=3)
    fail(d, "b0", 2)
    d.record_success("b0")
    assert fail(d, "b0", 2) == [None, None] and not d.is_ejected("b0")


def test_an_error_rate_over_the_window_ejects():
    d, _ = detector(consecutive_failures=100, error_rate=0.5, min_requests=10, window_s=10)
    for _ in range(4):
        d.record_success("b0")
        assert d.record_failure("b0", FailureKind.SERVER_ERROR) is None  # fewer than 10 outcomes yet
    d.record_success("b0")
    assert d.record_failure("b0", FailureKind.SERVER_ERROR).reason == "error_rate"  # 5 of 10 failed
    assert d.is_ejected("b0")
    # Old outcomes leave the window: 4 failures long ago do not count with 6 fresh successes.
    d2, clock2 = detector(consecutive_failures=100, error_rate=0.5, min_requests=10, window_s=10)
    fail(d2, "b0", 4, FailureKind.TIMEOUT)
    clock2.now += 30
    for _ in range(5):
        d2.record_success("b0")
    assert fail(d2, "b0", 1) == [None]


def test_the_backoff_grows_and_a_half_open_probe_decides():
    d, clock = detector(consecutive_failures=1, base_ejection_s=5, max_ejection_s=300, probe_timeout_s=10)
    assert fail(d, "b0", 1)[0].ejected_for_s == 5
    clock.now += 5
    assert d.state("b0") is CircuitState.HALF_OPEN and d.admits("b0")
    assert not d.is_ejected("b0")  # this caller's request is the probe
    assert d.is_ejected("b0") and not d.admits("b0")  # the others wait for its outcome
    (t,) = fail(d, "b0", 1)
    assert (t.reason, t.ejected_for_s) == ("probe_failed", 10)
    clock.now += 10
    assert not d.is_ejected("b0")
    (t,) = fail(d, "b0", 1)
    assert t.ejected_for_s == 20
    clock.now += 20
    assert not d.is_ejected("b0")
    t = d.record_success("b0")
    assert t == Transition("b0", CircuitState.CLOSED, "probe_succeeded")
    assert t.describe() == "backend b0 back in service (probe_succeeded)"
    assert d.state("b0") is CircuitState.CLOSED and not d.is_ejected("b0")
    # Back soon after: the backoff keeps growing. Long in service: it starts over.
    clock.now += 1
    assert fail(d, "b0", 1)[0].ejected_for_s == 40
    clock.now += 40
    d.is_ejected("b0")
    d.record_success("b0")
    clock.now += 300
    assert fail(d, "b0", 1)[0].ejected_for_s == 5


def test_the_backoff_is_capped():
    d, clock = detector(consecutive_failures=1, base_ejection_s=5, max_ejection_s=12)
    durations = []
    for _ in range(4):
        durations.append(fail(d, "b0", 1)[0].ejected_for_s)
        clock.now += durations[-1]
        d.is_ejected("b0")
    assert durations == [5, 10, 12, 12]


def test_a_probe_that_never_reports_back_lets_another_through():
    d, clock = detector(consecutive_failures=1, base_ejection_s=5, probe_timeout_s=10)
    fail(d, "b0", 1)
    clock.now += 5
    assert not d.is_ejected("b0")
    clock.now += 9
    assert d.is_ejected("b0")
    clock.now += 1
    assert not d.is_ejected("b0")


def test_outcomes_of_requests_sent_before_the_ejection_change_nothing():
    d, clock = detector(consecutive_failures=1, base_ejection_s=5)
    fail(d, "b0", 1)
    assert d.record_failure("b0", CONNECT) is None and d.record_success("b0") is None
    assert d.is_ejected("b0")
    clock.now += 5
    assert not d.is_ejected("b0")


def test_at_most_a_share_of_the_pool_is_ejected():
    d, _ = detector(n=4, consecutive_failures=1, max_ejected_share=0.5)
    assert fail(d, "b0", 1)[0] is not None
    assert fail(d, "b1", 1)[0] is not None
    assert fail(d, "b2", 1) == [None]  # a third of four would pass half
    assert not d.is_ejected("b2")
    # A pool of one may still eject its backend (routing then keeps it anyway: nothing else is left).
    solo, _ = detector(n=1, consecutive_failures=1, max_ejected_share=0.0)
    assert solo.record_failure("b0", CONNECT) is not None


def test_failures_are_counted_by_kind():
    d, _ = detector(consecutive_failures=100)
    fail(d, "b0", 2, FailureKind.OVERLOAD)
    fail(d, "b0", 1, FailureKind.TIMEOUT)
    assert d.failures("b0") == {FailureKind.OVERLOAD: 2, FailureKind.TIMEOUT: 1}


def test_the_reason_and_the_time_left_are_described_and_ejections_counted_by_reason():
    d, clock = detector(consecutive_failures=2, base_ejection_s=5)
    assert d.describe("b0") == {"circuit": "closed"}
    fail(d, "b0", 2)
    clock.now += 2
    assert d.describe("b0") == {"circuit": "open", "reason": "consecutive_failures", "ejected_for_s": 3.0}
    clock.now += 3
    assert d.describe("b0")["circuit"] == "half_open"
    assert not d.is_ejected("b0")  # the probe
    fail(d, "b0", 1)
    assert d.describe("b0") == {"circuit": "open", "reason": "probe_failed", "ejected_for_s": 10.0}
    assert d.ejections("b0") == {"consecutive_failures": 1, "probe_failed": 1} and d.ejections("b1") == {}


def test_a_backend_that_never_fails_holds_no_more_than_its_window():
    """Its successes count per second; a new second drops what left the window, so
    a day without a failure holds ten seconds of counts, not a day of them."""
    det, clock = detector(1, window_s=10)
    for _ in range(86_400):
        det.record_success("b0")
        clock.now += 1
    assert len(det._backends["b0"].window._buckets) <= 11
