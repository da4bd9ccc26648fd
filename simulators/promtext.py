"""A minimal Prometheus text-format writer: the simulators render their own
metric families so names, labels and types match each runtime exactly, without a
registry per process."""

from __future__ import annotations

import bisect
import math

DEFAULT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        at = bisect.bisect_left(self.buckets, value)
        if at < len(self.counts):
            self.counts[at] += 1
        self.count += 1
        self.sum += value


def _labels(labels: dict[str, str], extra: str = "") -> str:
    parts = [f'{k}="{v}"' for k, v in labels.items()]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf"
    return repr(float(value))


class Exposition:
    """Collects families, then `text()` renders them."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.lines: list[str] = []

    def gauge(self, name: str, help_text: str, value: float, extra: dict[str, str] | None = None) -> None:
        self.lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} gauge",
            f"{name}{_labels({**self.labels, **(extra or {})})} {_num(value)}",
        ]

    def counter(
        self,
        name: str,
        help_text: str,
        values: dict[tuple[tuple[str, str], ...], float] | float,
        suffix: str = "_total",
    ) -> None:
        """`name` without `_total`; samples get the suffix, as prometheus_client writes them
        (TGI's Rust exporter writes counters without it: pass `suffix=""`)."""
        self.lines += [f"# HELP {name}{suffix} {help_text}", f"# TYPE {name}{suffix} counter"]
        if not isinstance(values, dict):
            values = {(): values}
        for extra, value in values.items():
            self.lines.append(f"{name}{suffix}{_labels({**self.labels, **dict(extra)})} {_num(value)}")

    def histogram(self, name: str, help_text: str, hist: Histogram) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip(hist.buckets, hist.counts):
            cumulative += count
            le = 'le="' + _num(bound) + '"'
            self.lines.append(f"{name}_bucket{_labels(self.labels, le)} {cumulative}")
        inf = 'le="+Inf"'
        self.lines.append(f"{name}_bucket{_labels(self.labels, inf)} {hist.count}")
        self.lines.append(f"{name}_count{_labels(self.labels)} {hist.count}")
        self.lines.append(f"{name}_sum{_labels(self.labels)} {_num(hist.sum)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
