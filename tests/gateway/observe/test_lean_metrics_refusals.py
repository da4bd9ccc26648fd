"""What the lean metrics (gateway/observe/lean_metrics.py) refuse, as prometheus_client's own
classes refuse it (a negative counter increase, buckets out of order, fewer than two buckets
at, below and above that bound), the label rules (`le` only a histogram's refusal, a label
count named with its metric), and a gauge's increases adding up from the default step of 1."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.observe.lean_metrics import LeanCounter, LeanGauge, LeanHistogram


def refusal(make) -> str:
    with pytest.raises(ValueError) as exc:
        make()
    return str(exc.value)


def test_a_negative_counter_increase_is_refused_as_prometheus_client_refuses_it():
    said = refusal(lambda: LeanCounter("c", "h").inc(-1))
    assert said == refusal(lambda: Counter("c", "h", registry=CollectorRegistry()).inc(-1))
    assert said == "Counters can only be incremented by non-negative amounts."
    counter = LeanCounter("c", "h")
    counter.inc(0)
    assert counter.labels().value == 0


@pytest.mark.parametrize("buckets", [(2.0, 1.0), (1.0, math.inf, 2.0)])
def test_buckets_out_of_order_are_refused_as_prometheus_client_refuses_them(buckets):
    said = refusal(lambda: LeanHistogram("h", "h", buckets=buckets))
    assert said == refusal(lambda: Histogram("h", "h", buckets=buckets, registry=CollectorRegistry()))
    assert said == "Buckets not in sorted order"


@pytest.mark.parametrize("buckets", [(), (math.inf,)])
def test_fewer_than_two_buckets_with_inf_are_refused(buckets):
    said = refusal(lambda: LeanHistogram("h", "h", buckets=buckets))
    assert said == refusal(lambda: Histogram("h", "h", buckets=buckets, registry=CollectorRegistry()))
    assert said == "Must have at least two buckets"


@pytest.mark.parametrize(("buckets", "bounds"), [((1.0,), (1.0, math.inf)), ((1.0, math.inf), (1.0, math.inf))])
def test_two_buckets_with_inf_are_enough(buckets, bounds):
    assert LeanHistogram("h", "h", buckets=buckets).bounds == bounds


def test_le_is_refused_as_a_histograms_label_only():
    said = refusal(lambda: LeanHistogram("h", "h", ["model", "le"]))
    assert said == "Invalid label name for histogram: le"
    assert LeanCounter("c", "h", ["le"]).labelnames == ("le",)
    assert LeanGauge("g", "h", ["le"]).labelnames == ("le",)
    assert LeanHistogram("h", "h", ["LE"]).labelnames == ("LE",)


def test_a_wrong_label_count_names_the_metric_and_the_values():
    gauge = LeanGauge("switchyard_g", "h", ["model"])
    assert refusal(lambda: gauge.labels("m", "extra")) == "Incorrect label count for switchyard_g: ('m', 'extra')"


def test_a_gauges_increases_add_up_from_a_default_step_of_one():
    gauge = LeanGauge("g", "h")
    gauge.inc()
    gauge.inc()
    gauge.inc(2.5)
    assert gauge.labels().value == 4.5
    child = LeanGauge("g2", "h", ["m"]).labels("a")
    child.inc(2)
    child.inc(3)
    assert child.value == 5
