"""Counter, Gauge and Histogram for the request path: each child keeps plain numbers in
`__slots__`, and each family is a collector of the registry it is built for, rendering
at scrape time what prometheus_client's own classes render for the same operations
(name, HELP, TYPE, labels, buckets, `_created`, children in the order first asked for).

prometheus_client's children pay for thread safety on every update (a lock per value,
checks per call: about 55 Python instructions an `inc` and 115 an `observe`, against 13
and 35 here). These do not lock: an update is a read-modify-write, safe only when every
writer runs on one thread. Every writer of the gateway's, the protection's and the
rollouts' metrics runs on the event loop's thread (the native engine's threads hand their
events over with `call_soon_threadsafe` and write only their own `switchyard_engine_*`
metrics, which stay prometheus_client's: engine/metrics.py), and the scrape renders on
the same thread.
A metric written from another thread must keep prometheus_client's classes.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

# One sample of a child: the name's suffix, the labels it adds, the value.
Own = tuple[str, dict[str, str], float]


class CounterChild:
    __slots__ = ("value", "created")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount

    def samples(self, created: bool) -> list[Own]:
        own: list[Own] = [("_total", {}, self.value)]
        if created:
            own.append(("_created", {}, self.created))
        return own


class GaugeChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)

    def samples(self, created: bool) -> list[Own]:
        return [("", {}, self.value)]


class HistogramChild:
    """`counts[i]`: the observations of bucket i alone; the exposition adds them up."""

    __slots__ = ("bounds", "counts", "sum", "created")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.sum += amount
        bounds = self.bounds
        i = bisect_left(bounds, amount)  # the last bound is +Inf: i is a bucket's
        if amount <= bounds[i]:  # False for NaN only, which prometheus_client counts in no bucket
            self.counts[i] += 1

    def samples(self, created: bool) -> list[Own]:
        own: list[Own] = []
        acc = 0.0
        for bound, count in zip(self.bounds, self.counts):
            acc += count
            own.append(("_bucket", {"le": floatToGoString(bound)}, acc))
        own.append(("_count", {}, acc))
        if self.bounds[0] >= 0:
            own.append(("_sum", {}, self.sum))
        if created:
            own.append(("_created", {}, self.created))
        return own


class _Samples(Protocol):
    def samples(self, created: bool) -> list[Own]: ...


Child = TypeVar("Child", bound=_Samples)


class _Family(Generic[Child]):
    """One metric: its definition, its children by label values, and its collector.
    `labels(*values)` is one dict lookup once a label set was seen."""

    kind = ""

    def __init__(
        self, name: str, documentation: str, labelnames: Iterable[str] = (), registry: CollectorRegistry | None = None
    ) -> None:
        if self.kind == "counter" and name.endswith("_total"):
            name = name[: -len("_total")]
        Metric(name, documentation, self.kind)  # checks the name as prometheus_client does
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        if "le" in self.labelnames and self.kind == "histogram":
            raise ValueError("Invalid label name for histogram: le")
        self._lookup: dict[tuple, Child] = {}  # the values as asked (a status as int or str) -> child
        self._series: dict[tuple[str, ...], Child] = {}  # the values as exposed -> child, first asked first
        if not self.labelnames:
            self._add(())
        if registry is not None:
            registry.register(self)

    def _child(self) -> Child:
        raise NotImplementedError

    def labels(self, *values: object) -> Child:
        try:
            return self._lookup[values]
        except KeyError:
            return self._add(values)

    def _add(self, values: tuple) -> Child:
        if len(values) != len(self.labelnames):
            raise ValueError(f"Incorrect label count for {self.name}: {values!r}")
        exposed = tuple(str(v) for v in values)
        child = self._series.get(exposed)
        if child is None:
            child = self._series[exposed] = self._child()
        self._lookup[values] = child
        return child

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]

    def collect(self) -> list[Metric]:
        family = Metric(self.name, self.documentation, self.kind)
        created = prometheus_metrics._use_created  # PROMETHEUS_DISABLE_CREATED_SERIES, as prometheus_client reads it
        for exposed, child in self._series.items():
            series = dict(zip(self.labelnames, exposed))
            for suffix, extra, value in child.samples(created):
                family.add_sample(self.name + suffix, {**series, **extra}, value)
        return [family]


class LeanCounter(_Family[CounterChild]):
    kind = "counter"

    def _child(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1) -> None:
        self.labels().inc(amount)


class LeanGauge(_Family[GaugeChild]):
    kind = "gauge"

    def _child(self) -> GaugeChild:
        return GaugeChild()

    def inc(self, amount: float = 1) -> None:
        self.labels().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self.labels().dec(amount)

    def set(self, value: float) -> None:
        self.labels().set(value)


class LeanHistogram(_Family[HistogramChild]):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        registry: CollectorRegistry | None = None,
        buckets: Sequence[float] = prometheus_metrics.Histogram.DEFAULT_BUCKETS,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("Buckets not in sorted order")
        if bounds and bounds[-1] != math.inf:
            bounds.append(math.inf)
        if len(bounds) < 2:
            raise ValueError("Must have at least two buckets")
        self.bounds = tuple(bounds)
        super().__init__(name, documentation, labelnames, registry)

    def _child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def observe(self, amount: float) -> None:
        self.labels().observe(amount)
