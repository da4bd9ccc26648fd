"""Load from a Prometheus text endpoint (exposition format 0.0.4), as vLLM, SGLang
(`--enable-metrics`), TRT-LLM (`/prometheus/metrics`) and TGI expose it.

The dialects need a handful of gauges and counters summed over label sets (one series
per engine, DP rank or model): this reads samples and leaves types, help text and
histograms' meaning to the caller.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import aiohttp

from adapters.base import LoadSnapshot
from adapters.dialect import Reader

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


async def scrape(http: Reader, path: str) -> tuple[list[Sample] | None, float | None]:
    """The endpoint's samples and when they were read; (None, None) when unreachable,
    (None, read_at) when it answered an error."""
    try:
        status, raw = await http.get(path)
    except (TimeoutError, aiohttp.ClientError, OSError):
        return None, None
    read_at = time.time()
    if status != 200:
        return None, read_at
    return parse(raw.decode(errors="replace")), read_at


async def gauge_load(http: Reader, path: str, running: str, waiting: str, kv_usage: str, hit_rate: str) -> LoadSnapshot:
    """Load from an endpoint whose gauges say it all: running and waiting summed over
    engines, KV usage and prefix hit rate averaged."""
    samples, read_at = await scrape(http, path)
    if samples is None:
        return LoadSnapshot() if read_at is None else LoadSnapshot(read_at=read_at)
    return gauge_snapshot(samples, read_at, running, waiting, mean(samples, kv_usage), mean(samples, hit_rate))


def gauge_snapshot(
    samples: list[Sample],
    read_at: float | None,
    running: str,
    waiting: str,
    kv_usage: float | None,
    prefix_hit_rate: float | None,
) -> LoadSnapshot:
    """A LoadSnapshot from a runtime's running/waiting gauges (summed over engines)."""
    r = total(samples, running)
    w = total(samples, waiting)
    return LoadSnapshot(
        waiting=None if w is None else int(w),
        running=None if r is None else int(r),
        kv_usage=kv_usage,
        prefix_hit_rate=prefix_hit_rate,
        read_at=time.time() if read_at is None else read_at,
    )
