"""Outlier ejection at its edges (tests/policies/test_ejection.py holds the rules):
outcomes leaving the window at exactly its length and staying in their own second,
the error-rate share below its threshold, the cap in a pool of two, the probe
timeout boundary, a healthy backend admitted, the transitions naming their backend,
the backoff on a clock far from zero, and times given by the caller."""

from __future__ import annotations

from policies.ejection import CircuitState, EjectionConfig, FailureKind, OutlierDetector
from policies.retry_budget import RetryBudget
from tests.manual_clock import Clock

CONNECT = FailureKind.CONNECT


def detector(n=4, start=100.0, **cfg) -> tuple[OutlierDetector, Clock]:
    clock = Clock(start)
    return OutlierDetector([f"b{i}" for i in range(n)], EjectionConfig(**cfg), clock), clock


def test_an_outcome_leaves_the_window_exactly_window_s_later():
    d, clock = detector(consecutive_failures=100, min_requests=2, error_rate=0.5, window_s=10)
    d.record_success("b0")
    clock.now += 10
    assert d.record_failure("b0", CONNECT) is None  # the success is gone: one outcome is too few


def test_outcomes_keep_the_second_they_happened_in():
    d, clock = detector(consecutive_failures=100, min_requests=2, error_rate=0.5, window_s=10)
    assert d.record_failure("b0", CONNECT) is None
    clock.now += 5
    d.record_success("b0")
    clock.now += 5  # the first failure leaves; the success stays
    t = d.record_failure("b0", CONNECT)
    assert t is not None and (t.backend, t.reason) == ("b0", "error_rate")


def test_a_failure_share_below_the_rate_does_not_eject():
    d, _ = detector(consecutive_failures=100, min_requests=10, error_rate=0.5)
    for _ in range(6):
        d.record_success("b0")
    assert [d.record_failure("b0", CONNECT) for _ in range(4)] == [None] * 4  # 4 of 10 < half


def test_a_pool_of_two_ejects_one_at_most_with_the_default_share():
    d, _ = detector(n=2, consecutive_failures=1)
    assert d.record_failure("b0", CONNECT) is not None
    assert d.record_failure("b1", CONNECT) is None


def test_a_probe_outstanding_exactly_the_timeout_lets_another_through():
    d, clock = detector(consecutive_failures=1, base_ejection_s=5, probe_timeout_s=10)
    d.record_failure("b0", CONNECT)
    clock.now += 5
    assert not d.is_ejected("b0")  # the probe
    clock.now += 10
    assert d.admits("b0")


def test_a_healthy_backend_is_admitted():
    d, _ = detector()
    assert d.admits("b1") and d.state("b1") is CircuitState.CLOSED


def test_a_failed_probe_names_its_backend():
    d, clock = detector(consecutive_failures=1, base_ejection_s=5)
    d.record_failure("b2", CONNECT)
    clock.now += 5
    d.is_ejected("b2")
    t = d.record_failure("b2", CONNECT)
    assert (t.backend, t.reason, t.ejected_for_s) == ("b2", "probe_failed", 10)


def test_the_backoff_keeps_growing_on_a_clock_far_from_zero():
    d, clock = detector(start=1_000.0, consecutive_failures=1, base_ejection_s=5, max_ejection_s=300)
    d.record_failure("b0", CONNECT)
    clock.now += 5
    d.is_ejected("b0")
    d.record_success("b0")
    clock.now += 1  # back in service for a second only
    assert d.record_failure("b0", CONNECT).ejected_for_s == 10


def test_a_time_given_by_the_caller_is_the_one_used():
    d, clock = detector(consecutive_failures=1, base_ejection_s=5, probe_timeout_s=10)
    t0 = clock.now
    assert d.record_failure("b0", CONNECT, now=t0 + 1000) is not None  # ejected until t0 + 1005
    assert d.state("b0", now=t0 + 1004) is CircuitState.OPEN and not d.admits("b0", now=t0 + 1004)
    assert d.is_ejected("b0", now=t0 + 1004)
    assert d.state("b0", now=t0 + 1005) is CircuitState.HALF_OPEN and d.admits("b0", now=t0 + 1005)
    assert not d.is_ejected("b0", now=t0 + 1005)  # the probe
    assert d.record_success("b0", now=t0 + 1006) is not None
    # readmitted at t0 + 1006, so a failure 4 s later doubles the backoff
    assert d.record_failure("b0", CONNECT, now=t0 + 1010).ejected_for_s == 10


def test_the_retry_budget_is_judged_at_the_time_given():
    budget = RetryBudget(EjectionConfig(retry_ratio=0.5, min_retries=0, window_s=10), clock=Clock(100.0))
    budget.record_request(now=1100.0)
    budget.record_request(now=1100.0)
    assert budget.may_retry(now=1100.0)  # one retry for two requests at half (no floor)
    assert not budget.may_retry(now=1100.0)
    assert not budget.may_retry(now=5000.0)  # those requests left the window long ago
