"""The lean metrics (gateway/observe/lean_metrics.py) expose byte for byte what
prometheus_client's own Counter, Gauge and Histogram expose after the same operations,
in both text formats, with and without `_created`; and every metric the gateway, the
protection and the rollouts define renders as it did with prometheus_client's classes."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

import gateway.observe.metrics as gateway_metrics
from gateway.observe.lean_metrics import LeanCounter, LeanGauge, LeanHistogram
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.rollout_metrics import RolloutMetrics
from gateway.protection.metrics import ProtectionMetrics

CLASSIC = (Counter, Gauge, Histogram)
LEAN = (LeanCounter, LeanGauge, LeanHistogram)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    """`_created` is the wall clock at a child's birth: one instant for both sides."""
    monkeypatch.setattr("time.time", lambda: 1_764_000_000.125)


@pytest.fixture(params=[True, False], ids=["created", "no_created"])
def created(request, monkeypatch):
    monkeypatch.setattr(prometheus_metrics, "_use_created", request.param)
    return request.param


def operate(kinds) -> CollectorRegistry:
    """The same operations on a registry built with `kinds` (counter, gauge, histogram)."""
    counter, gauge, histogram = kinds
    registry = CollectorRegistry()
    requests = counter("demo_requests_total", "Requests by model and status.", ["model", "status"], registry=registry)
    solo = counter("demo_leaked", "An unlabelled counter.", registry=registry)
    depth = gauge("demo_depth", "A labelled gauge.", ["pool"], registry=registry)
    up = gauge("demo_up", "An unlabelled gauge.", registry=registry)
    latency = histogram(
        "demo_latency_seconds", "A labelled histogram.", ["model"], registry=registry, buckets=(0.01, 0.1, 1)
    )
    default = histogram("demo_default_seconds", "Default buckets, no labels.", registry=registry)
    below_zero = histogram("demo_offset", "A negative first bound: no _sum.", registry=registry, buckets=(-1, 0, 1))
    from_zero = histogram("demo_from_zero", "A first bound of 0: a _sum.", registry=registry, buckets=(0, 1))
    requests.labels("b", 200).inc()
    requests.labels("a", "200").inc(2)
    requests.labels("b", "200").inc(0.5)  # the same series as ("b", 200)
    requests.labels("a", "500")
    solo.inc()
    solo.inc(3)
    depth.labels("p1").inc(4)
    depth.labels("p1").dec(1.5)
    depth.labels("p2").set(7)
    up.set(1)
    up.dec()
    for amount in (0.0, 0.01, 0.05, 0.1, 0.5, 1.0, 2.0, 1e9, math.inf, math.nan):
        latency.labels("m").observe(amount)  # on each bound, between, past the last (+Inf), NaN
    latency.labels("n").observe(0.003)
    latency.labels("empty")
    for amount in (0.004, 0.3, 12.0):
        default.observe(amount)
    below_zero.observe(-3)
    below_zero.observe(0.5)
    from_zero.observe(0.5)
    return registry


def test_the_exposition_is_prometheus_clients_for_the_same_operations(created):
    classic, lean = operate(CLASSIC), operate(LEAN)
    assert generate_latest(lean) == generate_latest(classic)
    assert generate_openmetrics(lean) == generate_openmetrics(classic)
    text = generate_latest(lean).decode()
    assert 'demo_latency_seconds_bucket{le="+Inf",model="m"} 9.0' in text  # NaN counted in no bucket
    assert ("demo_requests_created" in text) is created


def test_the_checks_are_prometheus_clients():
    registry = CollectorRegistry()
    counter = LeanCounter("demo_total", "d", ["a"], registry=registry)
    with pytest.raises(ValueError):
        counter.labels("x").inc(-1)
    with pytest.raises(ValueError):
        counter.labels("x", "y")
    with pytest.raises(ValueError):
        counter.inc()  # a labelled metric's own value does not exist
    with pytest.raises(ValueError):
        LeanHistogram("demo_h", "d", registry=registry, buckets=(1, 0.5))
    with pytest.raises(ValueError):
        LeanCounter("demo", "d", registry=registry)  # the same names twice in one registry


def the_gateways_metrics(registry: CollectorRegistry) -> None:
    """Every metric the three owners define, each given a child and two updates."""
    for owner in (GatewayMetrics(registry), ProtectionMetrics(registry), RolloutMetrics(registry)):
        for metric in vars(owner).values():
            if not isinstance(metric, (*CLASSIC, *LEAN)):
                continue
            names = metric.labelnames if isinstance(metric, LEAN) else metric._labelnames
            child = metric.labels(*["v"] * len(names)) if names else metric
            if hasattr(child, "observe"):
                child.observe(0.02)
                child.observe(700)
            else:
                child.inc(3)


def test_every_gateway_metric_renders_as_with_prometheus_clients_classes(monkeypatch, created):
    lean = CollectorRegistry()
    the_gateways_metrics(lean)
    for name, kind in zip(("LeanCounter", "LeanGauge", "LeanHistogram"), CLASSIC):
        monkeypatch.setattr(gateway_metrics, name, kind)
    classic = CollectorRegistry()
    the_gateways_metrics(classic)
    assert b"switchyard_requests_total" in generate_latest(lean)
    assert generate_latest(lean) == generate_latest(classic)
