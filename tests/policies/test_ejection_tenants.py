"""Per-tenant failure accounting in the outlier detector: failures a request can
cause (5xx, first-byte timeouts) eject a backend only when they are not one
tenant's alone while others are served; connection failures count whoever sent them."""

from __future__ import annotations

from policies.ejection import CircuitState, EjectionConfig, FailureKind, OutlierDetector
from tests.manual_clock import Clock


def detector(**cfg) -> tuple[OutlierDetector, Clock]:
    clock = Clock(100.0)
    config = EjectionConfig(consecutive_failures=3, min_requests=6, **cfg)
    return OutlierDetector(["b"], config, clock), clock


def test_one_tenants_server_errors_do_not_eject_a_backend_that_serves_another():
    d, clock = detector()
    d.record_success("b", tenant="victim")
    for _ in range(30):  # far past consecutive_failures and the error rate
        clock.now += 0.1
        assert d.record_failure("b", FailureKind.SERVER_ERROR, tenant="attacker") is None
    assert d.state("b") is CircuitState.CLOSED
    # The failures are still counted by kind, for the metrics.
    assert d.failures("b")[FailureKind.SERVER_ERROR] == 30


def test_a_second_tenant_failing_makes_it_the_backends_fault():
    d, clock = detector()
    d.record_success("b", tenant="victim")
    d.record_failure("b", FailureKind.SERVER_ERROR, tenant="attacker")
    d.record_failure("b", FailureKind.SERVER_ERROR, tenant="attacker")
    change = d.record_failure("b", FailureKind.SERVER_ERROR, tenant="victim")
    assert change is not None and change.reason == "consecutive_failures"


def test_the_only_tenant_served_is_witness_enough():
    # Auth off, or one tenant at a time: its failures are all there is to go on.
    d, clock = detector()
    for _ in range(2):
        assert d.record_failure("b", FailureKind.SERVER_ERROR, tenant="") is None
    assert d.record_failure("b", FailureKind.SERVER_ERROR, tenant="") is not None


def test_others_served_long_ago_do_not_shield_a_failing_backend():
    d, clock = detector(window_s=10.0)
    d.record_success("b", tenant="victim")
    clock.now += 11  # the victim's success left the window
    d.record_failure("b", FailureKind.TIMEOUT, tenant="attacker")
    d.record_failure("b", FailureKind.TIMEOUT, tenant="attacker")
    assert d.record_failure("b", FailureKind.TIMEOUT, tenant="attacker") is not None


def test_no_connection_is_the_backends_state_whoever_asked():
    d, clock = detector()
    d.record_success("b", tenant="victim")
    d.record_failure("b", FailureKind.CONNECT, tenant="attacker")
    d.record_failure("b", FailureKind.CONNECT, tenant="attacker")
    assert d.record_failure("b", FailureKind.CONNECT, tenant="attacker") is not None
