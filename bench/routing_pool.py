"""Repetitions of `make bench-routing` (bench/routing_bench.py): the order the
policies of a rate run in, and one row per policy and rate pooled over its repetitions.

Why repeat and rotate: with one run per policy in a fixed order, a TTFT p99 of about
150 requests is the second-worst sample, and whichever policy runs last always runs on
a machine that the runs before it warmed (or loaded). Repetition k starts at policy k,
so that every policy takes every place in the order; the figures of a policy are pooled
over its repetitions (percentiles over all its requests, not a mean of percentiles), and
the min-max of the per-repetition p99 is kept so that a reader sees the noise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.metrics import distribution_ms


def rotation(policies: Sequence[str], k: int) -> tuple[str, ...]:
    """The order of repetition k: policy k first, then the rest in their order, wrapping."""
    n = len(policies)
    return tuple(policies[(k + i) % n] for i in range(n)) if n else ()


def schedule(policies: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """Every (repetition, policy) of one rate, in the order they run."""
    return [(k, p) for k in range(repeats) for p in rotation(policies, k)]


def spread(values: Sequence[float | None]) -> list[float] | None:
    known = [v for v in values if v is not None]
    return [min(known), max(known)] if known else None


def pool(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, rate), rates ascending and policies in the order first seen,
    pooled over that policy's repetitions: TTFT and TPOT percentiles over all their
    requests, hit rate from the summed engine counters, goodput the mean, requests per
    backend summed (so load max/min is over all of them), and the min-max of the
    per-repetition TTFT p99 and goodput."""
    keys: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for r in sorted(runs, key=lambda r: r["rate"]):  # stable: policies stay in the order first seen
        keys.setdefault((r["rate"], r["policy"]), []).append(r)
    rows = []
    for (rate, policy), reps in keys.items():
        queries = sum(r["queries"] for r in reps)
        hits = sum(r["hits"] for r in reps)
        served: dict[str, int] = {}
        for r in reps:
            for name, n in r["served"].items():
                served[name] = served.get(name, 0) + n
        loads = list(served.values())
        ttft = distribution_ms(v for r in reps for v in r["ttft_s"])
        tpot = distribution_ms(v for r in reps for v in r["tpot_s"])
        rows.append(
            {
                "policy": policy,
                "rate": rate,
                "repeats": len(reps),
                "requests": sum(r["requests"] for r in reps),
                "ok": sum(r["ok"] for r in reps),
                "failed": sum(r["failed"] for r in reps),
                "hit_rate": hits / queries if queries else None,
                "evicted": None if any(r.get("evicted") is None for r in reps) else sum(r["evicted"] for r in reps),
                "ttft_p50_ms": ttft["p50"],
                "ttft_p99_ms": ttft["p99"],
                "tpot_p50_ms": tpot["p50"],
                "goodput_rps": sum(r["goodput_rps"] for r in reps) / len(reps),
                "served": served,
                "load_ratio": max(loads) / min(loads) if loads and min(loads) > 0 else None,
                "ttft_p99_spread_ms": spread([r["ttft_p99_ms"] for r in reps]),
                "goodput_spread_rps": spread([r["goodput_rps"] for r in reps]),
            }
        )
    return rows


def within_spread(a: dict[str, Any], b: dict[str, Any], key: str = "ttft_p99_ms") -> bool:
    """Whether the pooled figures of two rows differ by no more than the wider of their
    per-repetition spreads (max - min): a difference the repetitions themselves show."""
    spread_key = {"ttft_p99_ms": "ttft_p99_spread_ms", "goodput_rps": "goodput_spread_rps"}[key]
    if a.get(key) is None or b.get(key) is None:
        return False
    widths = [s[1] - s[0] for s in (a.get(spread_key), b.get(spread_key)) if s]
    return bool(widths) and abs(a[key] - b[key]) <= max(widths)
