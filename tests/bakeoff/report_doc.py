"""A fixed bake-off result (the JSON `bakeoff run` writes) for the report and compare tests."""

from __future__ import annotations

import copy
from typing import Any

from bakeoff.knee import wilson_interval
from bakeoff.run import REPORT_KIND


def summary(ttft_p99: float, good: int, n: int = 40, failed: int = 0, tok_s: float = 300.0) -> dict[str, Any]:
    dist = {"count": n, "mean": ttft_p99 / 2, "min": 1.0, "max": ttft_p99, "p50": ttft_p99 / 3, "p90": ttft_p99 * 0.8,
            "p95": ttft_p99 * 0.9, "p99": ttft_p99}  # fmt: skip
    return {
        "requests": {"total": n, "ok": n - failed, "failed": failed, "cancelled": 0},
        "failure_rate": failed / n,
        "ttft_ms": dist,
        "itl_ms": dist,
        "tpot_ms": dist,
        "e2e_ms": dist,
        "goodput": {"good": good, "requests_per_s": good / 10, "fraction": good / n},
        "throughput": {"requests_per_s": n / 10, "output_tokens_per_s": tok_s},
        "cache_hit_pct": 50.0,
    }


def point(rate: float, verdict: str, ttft_p99: float, good: int, n: int = 40) -> dict[str, Any]:
    return {"rate": rate, "verdict": verdict, "good": good, "judged": n, "interval": list(wilson_interval(good, n, 0.9)),
            "why": "", "summary": summary(ttft_p99, good, n),
            "runtime_metrics": {"runtime": {"samples": 3, "error": None,
                                            "series": {"vllm:num_requests_waiting": {"max": 3.0, "mean": 1.0, "first": 0.0, "last": 0.0}}}}}  # fmt: skip


CONDITIONS = {
    "runtime": {"adapter": "vllm", "name": "vllm", "version": "0.33.0", "source": "/version", "reported": {}},
    "model": {"model_dir": None},
    "settings": {},
    "hardware": {"cpu_model": "test cpu", "cores": 2},
    "gateway": {"version": "0.1.0", "identified_as": "switchyard", "config_sha256": "ab" * 32},
}


def candidate(name: str, knee: float | None, ttft_p99: float = 100.0, **over: Any) -> dict[str, Any]:
    points = [point(1.0, "pass", ttft_p99, 40)]
    if knee is not None:
        points.append(point(knee, "pass", ttft_p99, 40))
        points.append(point(knee * 2, "fail", ttft_p99 * 5, 10))
    else:
        points = [point(1.0, "fail", ttft_p99 * 5, 10)]
    knee_check = {
        "name": "knee",
        "outcome": "pass" if knee is not None else "fail",
        "detail": f"knee {knee}" if knee is not None else "no probed rate met the SLOs",
        "evidence": {"knee_rate": knee, "lowest_non_pass": None, "stop_reason": "converged", "points": points,
                     "cdf": {"rate": knee or 1.0, "ttft_ms": [10.0, 20.0, ttft_p99], "tpot_ms": [5.0], "e2e_ms": [50.0]}},
    }  # fmt: skip
    c = {
        "name": name,
        "backend": {"adapter": "vllm"},
        "launch": None,
        "status": "measured",
        "error": None,
        "conditions": copy.deepcopy(CONDITIONS),
        "stages": [
            {"stage": "eliminate", "candidate": name, "checks": [{"name": "tools", "outcome": "pass", "detail": "", "evidence": {}}], "seconds": 1.0},
            {"stage": "comparable", "candidate": name, "checks": [{"name": "tokenization", "outcome": "pass", "detail": "", "evidence": {}}], "seconds": 1.0},
            {"stage": "measure", "candidate": name, "checks": [knee_check], "seconds": 10.0},
            {"stage": "production", "candidate": name, "checks": [{"name": "cancellation", "outcome": "pass", "detail": "", "evidence": {}}], "seconds": 1.0},
        ],
    }  # fmt: skip
    c.update(over)
    return c


def eliminated(name: str) -> dict[str, Any]:
    c = candidate(name, None)
    c["status"] = "eliminated"
    c["stages"] = [
        {"stage": "eliminate", "candidate": name, "checks": [{"name": "stream_termination", "outcome": "fail",
         "detail": "the stream ended without data: [DONE]", "evidence": {}}], "seconds": 1.0},
        {"stage": "measure", "candidate": name, "checks": [{"name": "measure", "outcome": "skip", "detail": "eliminated", "evidence": {}}], "seconds": 0.0},
    ]  # fmt: skip
    return c


def document(candidates: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": REPORT_KIND,
        "version": 1,
        "started": "2026-12-02T11:00:00+00:00",
        "seconds": 100.0,
        "plan": {
            "seed": 7,
            "slo": {
                "ttft_ms": 500.0,
                "tpot_ms": 50.0,
                "e2e_ms": None,
                "itl_p99_ms": None,
                "error_rate": 0.01,
                "attainment": 0.9,
                "confidence": 0.9,
            },
        },  # fmt: skip
        "plan_sha256": "cd" * 32,
        "workload": {
            "description": "generated: 40 sessions",
            "sessions": 40,
            "requests": 40,
            "tenants": ["a"],
            "native_rate": None,
            "sha256": "ef" * 32,
        },  # fmt: skip
        "definitions": {"TTFT": "time to the first content chunk"},
        "candidates": candidates,
    }
