"""Metrics from raw request timelines; the formulas are also written into every
report (see `DEFINITIONS`), because tools disagree on names (bench/README.md,
"Metric names across tools").

Pure functions over `RequestRecord`s: no clock, no I/O, so tests can feed
synthetic timelines with known answers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bench.records import FAILURE_KINDS, RequestRecord

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)

DEFINITIONS: dict[str, str] = {
    "content chunk": "an SSE chunk whose choices carry non-empty text, delta.content, "
    "delta.reasoning_content or delta.tool_calls; role-only, empty and usage-only chunks are not content",
    "TTFT": "time from sending the request to the first content chunk (streaming); "
    "for a non-streaming request, to the end of the body (the client sees no token earlier)",
    "ITL": "every gap between consecutive content chunks of one request, pooled over requests "
    "(a per-chunk figure: a chunk carrying several tokens is one gap; chunks that arrive in one network read "
    "share its timestamp, so their gap is 0)",
    "n (output tokens)": "usage.completion_tokens when the server reported it, else the number of content chunks; "
    "`output_tokens_source` says which",
    "TPOT": "(e2e - TTFT) / (n - 1), only for streaming requests with n > 1 (vLLM bench's TPOT, "
    "GuideLLM's and AIPerf's ITL)",
    "e2e": "time from sending the request to the last byte of the answer ([DONE] for a stream)",
    "duration": "from the first request sent to the last answer's end",
    "requests/s": "successful requests / duration",
    "output tokens/s": "sum of n over successful requests / duration",
    "goodput": "requests that succeeded and met every SLO given (TTFT <= ttft_ms, TPOT <= tpot_ms, "
    "e2e <= e2e_ms; a request with n <= 1 meets the TPOT SLO, one without a content chunk misses a TTFT SLO) "
    "/ duration; goodput_fraction = good / (succeeded + failed)",
    "failure": "HTTP status other than 200 (http_status), an error event inside a 200 stream (stream_error), "
    "client timeout (timeout), a stream that ended without [DONE] (cut_stream), no HTTP answer (connection). "
    "Cancelled requests (the harness's own cancellation load) are neither successes nor failures",
    "prompt tokens": "measured_mean: mean usage.prompt_tokens of successful requests (the whole prompt the server "
    "tokenized: the chat template and, in multi-turn runs, the history included); sized_mean: mean size of the text "
    "the harness wrote for each request, in tokens as the input sizing method counted them (`input_sizing`)",
    "send_lag": "open loop only: actual send time - scheduled arrival time (should stay near 0 whatever the server does)",
    "percentiles": "linear interpolation between closest ranks (numpy's default)",
}


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}

    @property
    def empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None


TokenSource = Literal["usage", "chunks"]


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    ttft_s: float | None
    e2e_s: float
    tpot_s: float | None
    itls_s: tuple[float, ...]
    output_tokens: int
    tokens_source: TokenSource


def request_metrics(rec: RequestRecord) -> RequestMetrics | None:
    """Derived numbers for one successful request; None for a failed or cancelled one."""
    if rec.outcome != "ok" or rec.end_s is None:
        return None
    times = rec.chunk_times
    if rec.usage_completion_tokens is not None:
        n, source = rec.usage_completion_tokens, "usage"
    else:
        n, source = len(times), "chunks"
    if not rec.stream:
        return RequestMetrics(
            ttft_s=rec.end_s, e2e_s=rec.end_s, tpot_s=None, itls_s=(), output_tokens=n, tokens_source=source
        )
    ttft = times[0] if times else None
    itls = tuple(b - a for a, b in zip(times, times[1:]))
    tpot = (rec.end_s - ttft) / (n - 1) if ttft is not None and n > 1 else None
    return RequestMetrics(ttft_s=ttft, e2e_s=rec.end_s, tpot_s=tpot, itls_s=itls, output_tokens=n, tokens_source=source)


def meets_slo(m: RequestMetrics, slo: Slo) -> bool:
    if slo.ttft_ms is not None and (m.ttft_s is None or m.ttft_s * 1000 > slo.ttft_ms):
        return False
    if slo.tpot_ms is not None and m.tpot_s is not None and m.tpot_s * 1000 > slo.tpot_ms:
        return False
    if slo.e2e_ms is not None and m.e2e_s * 1000 > slo.e2e_ms:
        return False
    return True


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """q in [0, 100]; linear interpolation between closest ranks."""
    if not sorted_values:
        raise ValueError("percentile of an empty list")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def distribution_ms(values_s: Iterable[float]) -> dict[str, float | int | None]:
    """count, mean, min, max and p50/p90/p95/p99 in milliseconds."""
    vals = sorted(v * 1000.0 for v in values_s)
    out: dict[str, float | int | None] = {"count": len(vals)}
    if not vals:
        out.update({"mean": None, "min": None, "max": None, **{f"p{p}": None for p in PERCENTILES}})
        return out
    out["mean"] = sum(vals) / len(vals)
    out["min"] = vals[0]
    out["max"] = vals[-1]
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(vals, p)
    return out


def run_duration(records: Sequence[RequestRecord]) -> float:
    ends = [r.sent_s + r.end_s for r in records if r.end_s is not None]
    if not records or not ends:
        return 0.0
    return max(ends) - min(r.sent_s for r in records)


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    events: list[tuple[float, int]] = []
    for r in records:
        if r.end_s is None:
            continue
        events.append((r.sent_s, 1))
        events.append((r.sent_s + r.end_s, -1))
    # Ends sort before starts at the same instant: back-to-back is not overlap.
    events.sort(key=lambda e: (e[0], e[1]))
    peak = cur = 0
    for _, delta in events:
        cur += delta
        peak = max(peak, cur)
    return peak


def summarize(records: Sequence[RequestRecord], slo: Slo, duration_s: float | None = None) -> dict[str, Any]:
    """The report's numbers for one set of records (a run, or one tenant of it).

    `duration_s` defaults to the records' own span; per-tenant summaries pass the
    whole run's so that their rates add up to the run's.
    """
    duration = run_duration(records) if duration_s is None else duration_s
    ok = [r for r in records if r.outcome == "ok"]
    failed = [r for r in records if r.outcome == "failed"]
    cancelled = [r for r in records if r.outcome == "cancelled"]
    metrics = [m for m in (request_metrics(r) for r in ok) if m is not None]

    sources = {m.tokens_source for m in metrics}
    source = sources.pop() if len(sources) == 1 else ("mixed" if sources else None)
    output_tokens = sum(m.output_tokens for m in metrics)
    prompt_tokens = [r.usage_prompt_tokens for r in ok if r.usage_prompt_tokens is not None]
    sized = [r.prompt_tokens_sized for r in records if r.prompt_tokens_sized is not None]
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    good = sum(1 for m in metrics if meets_slo(m, slo))
    judged = len(ok) + len(failed)

    failures: dict[str, int] = {k: 0 for k in FAILURE_KINDS}
    statuses: dict[str, int] = {}
    for r in failed:
        failures[r.failure_kind or "connection"] += 1
        if r.failure_kind == "http_status" and r.status is not None:
            statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    lags = [r.sent_s - r.scheduled_s for r in records if r.scheduled_s is not None]

    def rate(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    return {
        "requests": {"total": len(records), "ok": len(ok), "failed": len(failed), "cancelled": len(cancelled)},
        "failure_rate": len(failed) / judged if judged else 0.0,
        "failures": failures,
        "http_statuses": statuses,
        "duration_s": duration,
        "output_tokens_source": source,
        "output_tokens": output_tokens,
        "throughput": {
            "requests_per_s": rate(len(ok)),
            "output_tokens_per_s": rate(output_tokens),
            "input_tokens_per_s": rate(sum(prompt_tokens)) if prompt_tokens else None,
        },
        "prompt_tokens": {
            "measured_mean": sum(prompt_tokens) / len(prompt_tokens) if prompt_tokens else None,
            "sized_mean": sum(sized) / len(sized) if sized else None,
        },
        "ttft_ms": distribution_ms(m.ttft_s for m in metrics if m.ttft_s is not None),
        "itl_ms": distribution_ms(g for m in metrics for g in m.itls_s),
        "tpot_ms": distribution_ms(m.tpot_s for m in metrics if m.tpot_s is not None),
        "e2e_ms": distribution_ms(m.e2e_s for m in metrics),
        "goodput": {
            "slo": slo.as_dict(),
            "good": good,
            "requests_per_s": rate(good),
            "fraction": good / judged if judged else 0.0,
        },
        "cache_hit_pct": 100.0 * sum(cached) / sum(prompt_tokens) if cached and sum(prompt_tokens) else None,
        "peak_concurrency": peak_concurrency(records),
        "send_lag_ms": distribution_ms(lags) if lags else None,
    }


def summarize_run(records: Sequence[RequestRecord], slo: Slo) -> dict[str, Any]:
    """Overall summary plus one per tenant (over the same duration)."""
    overall = summarize(records, slo)
    tenants = sorted({r.tenant for r in records})
    overall["per_tenant"] = {
        t: summarize([r for r in records if r.tenant == t], slo, duration_s=overall["duration_s"]) for t in tenants
    }
    return overall
