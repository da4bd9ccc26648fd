"""A small reader for the Prometheus text exposition format (version 0.0.4).

vLLM, SGLang (`--enable-metrics`), TRT-LLM (`/prometheus/metrics`) and TGI expose
their load gauges this way. The adapters need a handful of gauges and counters,
summed over label sets (one series per engine, DP rank or model), so this reads
samples and leaves types, help text and histograms' meaning to the caller.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(slots=True, frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def parse(text: str) -> list[Sample]:
    """Every sample in `text`; malformed lines are skipped, not fatal (a scrape
    must not fail because a runtime added an odd series)."""
    samples: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if m is None:
            continue
        name, rest = m.group(0), line[m.end() :]
        labels: dict[str, str] = {}
        if rest.startswith("{"):
            end = _labels_end(rest)
            if end < 0:
                continue
            body, rest = rest[1:end], rest[end + 1 :]
            pos = 0
            while pos < len(body):
                lm = _LABEL.match(body, pos)
                if lm is None:
                    break
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        samples.append(Sample(name, labels, value))
    return samples


def _labels_end(rest: str) -> int:
    """Index of the `}` closing the label set, skipping quoted values."""
    quoted = escaped = False
    for i, ch in enumerate(rest):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "}" and not quoted:
            return i
    return -1


def total(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The sum of `name` over the series whose labels include `labels`; None when
    the runtime exposes no such series (unknown, not zero)."""
    found = False
    acc = 0.0
    for s in samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            if math.isnan(s.value):
                continue
            found = True
            acc += s.value
    return acc if found else None


def first_total(samples: list[Sample], *names: str) -> float | None:
    """`total` of the first name the runtime exposes (metric names changed across
    versions, e.g. vLLM's `gpu_cache_usage_perc` -> `kv_cache_usage_perc`)."""
    for name in names:
        value = total(samples, name)
        if value is not None:
            return value
    return None


def mean(samples: list[Sample], name: str) -> float | None:
    """The mean of a gauge over its series (a 0..1 ratio per engine or rank)."""
    values = [s.value for s in samples if s.name == name and not math.isnan(s.value)]
    return sum(values) / len(values) if values else None
