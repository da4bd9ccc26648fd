"""The plan's SLOs and the one place a probe is judged against them.

Per request (bench/metrics.py `meets_slo`, the goodput definition): TTFT, TPOT and E2E
bounds in ms; a request is good when it succeeded and met every bound given. Per probe:
the attainment (good / judged) decided by a Wilson interval against `attainment`
(bakeoff/knee.py), the failure rate against `error_rate`, and, when given, the pooled
ITL p99 against `itl_p99_ms` (ITL is per chunk gap, not per request, so it bounds the
probe's distribution rather than a request).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bakeoff.knee import Probe, decide, wilson_interval
from bench.metrics import Slo


class SloSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)
    itl_p99_ms: float | None = Field(None, gt=0)
    error_rate: float = Field(0.01, ge=0, le=1)  # the highest failure rate a passing probe may have
    attainment: float = Field(0.9, gt=0, lt=1)  # < 1: a finite sample never shows zero misses
    confidence: float = Field(0.9, gt=0, lt=1)  # of the Wilson interval that decides a probe

    @model_validator(mode="after")
    def _some_bound(self) -> SloSpec:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("give at least one of ttft_ms, tpot_ms, e2e_ms")
        return self

    @property
    def per_request(self) -> Slo:
        return Slo(ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms, e2e_ms=self.e2e_ms)


def judge(rate: float, summary: dict[str, Any], slo: SloSpec) -> Probe:
    """One probe's verdict from its bench summary (bench/metrics.py `summarize`)."""
    req = summary["requests"]
    judged = req["ok"] + req["failed"]
    good = summary["goodput"]["good"]
    interval = wilson_interval(good, judged, slo.confidence)
    verdict = decide(good, judged, slo.attainment, slo.confidence)
    why = []
    if summary["failure_rate"] > slo.error_rate:
        why.append(f"failure rate {summary['failure_rate']:.1%} > {slo.error_rate:.1%}")
    itl = summary["itl_ms"].get("p99")
    if slo.itl_p99_ms is not None and itl is not None and itl > slo.itl_p99_ms:
        why.append(f"ITL p99 {itl:.1f} ms > {slo.itl_p99_ms:g} ms")
    if why:
        verdict = "fail"
    return Probe(rate=rate, verdict=verdict, good=good, judged=judged, interval=interval, why="; ".join(why))
