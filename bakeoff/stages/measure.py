"""The measure stage: a candidate driven through its gateway by the bench harness, open
loop (bench/runner.py), with the plan's workload (bakeoff/workload.py).

1. Cold then warm: the workload once at `start_rate` on a freshly started runtime (its
   caches empty), then the same sessions again (prefixes cached); both reported.
2. The rate sweep: a bounded search for the knee (bakeoff/knee.py), each probe the whole
   workload at one rate, judged by bakeoff/slo.py `judge`.
3. Beside every probe the runtime's own metrics and the gateway's are sampled
   (bakeoff/sampler.py).

TTFT here is what a client of the gateway sees: from sending the request to the first
content chunk, so it includes the gateway (admission, routing), the runtime's queue and
prefill, and loopback transfer (bench/metrics.py `DEFINITIONS`).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bakeoff.knee import KneeSearch, Probe, Rerun, Verdict, rerun
from bakeoff.sampler import Sampler
from bakeoff.slo import SloSpec, judge
from bakeoff.verdict import CandidateTarget, Check, StageResult
from bakeoff.workload import Workload
from bench.client import Client, ClientConfig
from bench.metrics import request_metrics, summarize_run
from bench.progress import Progress
from bench.records import RequestRecord
from bench.runner import LoadPlan, Runner
from bench.sizing import PromptSizer
from bench.workloads import Session, Turn

CDF_POINTS = 400  # latency values kept per distribution for the report's CDF plots


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start_rate: float = Field(1.0, gt=0)  # sessions/s of the first probe (and the cold/warm phases)
    max_rate: float = Field(64.0, gt=0)
    growth: float = Field(2.0, gt=1)
    tolerance: float = Field(0.15, gt=0)  # stop bisecting when highest pass / lowest non-pass is within 1 + this
    max_probes: int = Field(8, ge=1, le=40)
    min_probe_s: float = Field(10.0, ge=0)  # a probe replays the workload until its arrivals span this long
    lengthen_undetermined: int = Field(1, ge=0, le=3)  # times an undetermined probe is run again, twice as long
    confirm_failures: int = Field(1, ge=0, le=3)  # a non-pass is believed after this many more non-pass runs
    cold_warm: bool = True
    warmup_requests: int = Field(15, ge=0, le=1000)  # sent before anything is measured, none shared with the workload
    warmup_concurrency: int = Field(8, ge=1, le=256)  # the last wave's width (waves of 1, 2, 4, ...)
    request_timeout_s: float = Field(60.0, gt=0)
    sample_interval_s: float = Field(0.5, gt=0)


@dataclass
class Inputs:
    """What the run gives the stage besides the target: the plan's workload and SLOs."""

    workload: Workload
    slo: SloSpec
    seed: int
    api_keys: dict[str, str] = field(default_factory=dict)  # tenant -> key of the candidate's gateway
    ignore_eos: bool = True
    temperature: float = 0.0
    progress: bool = False


async def probe(
    target: CandidateTarget, inputs: Inputs, settings: Settings, rate: float, label: str, min_duration_s: float
) -> tuple[dict[str, Any], list[RequestRecord], dict[str, Any]]:
    """The workload at `rate` through the gateway (replayed until it lasts `min_duration_s`):
    its summary, its records, the sampled metrics."""
    plan = inputs.workload.plan_at(rate, inputs.seed, min_duration_s)
    config = client_config(target, inputs, settings)
    urls = {"gateway": target.gateway_url.rstrip("/") + "/metrics"}
    if target.runtime_url:
        urls["runtime"] = target.runtime_url.rstrip("/") + "/metrics"
    sampler = Sampler(urls, settings.sample_interval_s)
    sampler.start()
    try:
        async with Client(config) as client:
            progress = Progress(plan.total_requests, label=label, enabled=inputs.progress and sys.stderr.isatty())
            records = await Runner(client, plan, progress).run()
    finally:
        metrics = await sampler.stop()
    return summarize_run(records, inputs.slo.per_request), records, metrics


def _cdfs(records: list[RequestRecord]) -> dict[str, list[float]]:
    ms = [m for m in (request_metrics(r) for r in records) if m is not None]

    def thin(values: list[float]) -> list[float]:
        values = sorted(values)
        if len(values) <= CDF_POINTS:
            return values
        step = (len(values) - 1) / (CDF_POINTS - 1)
        return [values[round(i * step)] for i in range(CDF_POINTS)]

    return {
        "ttft_ms": thin([m.ttft_s * 1000 for m in ms if m.ttft_s is not None]),
        "tpot_ms": thin([m.tpot_s * 1000 for m in ms if m.tpot_s is not None]),
        "e2e_ms": thin([m.e2e_s * 1000 for m in ms]),
    }


def _expected_s(workload: Workload, rate: float, settings: Settings) -> float:
    return max(workload.unit_arrivals[-1] / rate, settings.min_probe_s) + min(settings.request_timeout_s, 10.0)


async def run(target: CandidateTarget, settings: Settings, budget_s: float, inputs: Inputs) -> StageResult:
    started = time.perf_counter()
    checks: list[Check] = []
    search = KneeSearch(
        settings.start_rate, settings.max_rate, settings.growth, settings.tolerance, settings.max_probes
    )
    points: list[dict[str, Any]] = []
    cdf_source: tuple[float, list[RequestRecord]] | None = None

    def left() -> float:
        return budget_s - (time.perf_counter() - started)

    try:
        async with asyncio.timeout(budget_s):
            if settings.warmup_requests:
                checks.append(await _warm_up(target, inputs, settings))
            if settings.cold_warm:
                phases = {}
                for phase in ("cold", "warm"):
                    summary, _, metrics = await probe(target, inputs, settings, settings.start_rate, f"{phase} ", 0.0)
                    phases[phase] = {"rate": settings.start_rate, "summary": summary, "runtime_metrics": metrics}
                checks.append(_cold_warm_check(phases))
            while (rate := search.next_rate()) is not None:
                if _expected_s(inputs.workload, rate, settings) > left():
                    search.stop("budget")
                    break
                verdict, records = await _runs_at(rate, target, inputs, settings, points, left)
                search.record(verdict)
                if verdict.verdict == "pass" or cdf_source is None:
                    cdf_source = (rate, records)
    except TimeoutError:
        search.stop("budget")
    checks.append(_knee_check(search, points, cdf_source))
    checks.append(_runtime_metrics_check(points))
    return StageResult("measure", target.name, tuple(checks), seconds=time.perf_counter() - started)


async def _runs_at(
    rate: float,
    target: CandidateTarget,
    inputs: Inputs,
    settings: Settings,
    points: list[dict[str, Any]],
    left: Callable[[], float],
) -> tuple[Probe, list[RequestRecord]]:
    """One rate of the sweep: probed, and run again while bakeoff/knee.py `rerun` says a
    non-pass is not yet confirmed (and the budget holds the rerun); every run is a point,
    those run again marked superseded. The last run's verdict is the rate's."""
    duration = settings.min_probe_s
    verdicts: list[Verdict] = []
    again: Rerun | None = None
    while True:
        summary, records, metrics = await probe(target, inputs, settings, rate, f"{rate:g}/s ", duration)
        verdict = judge(rate, summary, inputs.slo)
        points.append({**_point(verdict, summary, metrics), "rerun": again})
        verdicts.append(verdict.verdict)
        again = rerun(verdicts, settings.lengthen_undetermined, settings.confirm_failures)
        if again is None:
            return verdict, records
        if again == "longer":  # too few requests to tell: the same rate, twice as long
            duration = 2 * max(duration, inputs.workload.unit_arrivals[-1] / rate)
        if max(duration, inputs.workload.unit_arrivals[-1] / rate) + 10.0 > left():
            return verdict, records
        points[-1]["superseded"] = True


def warmup_sessions(workload: Workload, seed: int, count: int) -> list[Session]:
    """`count` sessions of the workload's lengths and tenants (cycled) in words of their own
    and without its system prompts, so the warm-up fills no prefix cache the cold phase
    would find."""
    rng = np.random.default_rng([seed, 0x57A2])
    sizer = PromptSizer()
    out = []
    for i in range(count):
        model = workload.sessions[i % len(workload.sessions)]
        turn = model.turns[0]
        text = sizer.text(rng, f"warm-up {i}:", max(1, turn.words)).text
        out.append(Session([Turn(text, turn.max_tokens, turn.words)], tenant=model.tenant))
    return out


def client_config(target: CandidateTarget, inputs: Inputs, settings: Settings) -> ClientConfig:
    """How every measured or warm-up request of a candidate is sent: through its gateway,
    the plan's keys, sampling and length rule."""
    return ClientConfig(
        base_url=target.gateway_url,
        model=target.model,
        timeout_s=settings.request_timeout_s,
        api_keys=inputs.api_keys,
        ignore_eos=inputs.ignore_eos,
        extra_body={"temperature": inputs.temperature},
    )


async def _warm_up(target: CandidateTarget, inputs: Inputs, settings: Settings) -> Check:
    """Requests in waves of 1, 2, 4, ... at once (up to `warmup_concurrency`) before the first
    measured phase: a runtime that compiles or allocates on its first batches of each size
    (vLLM's CPU build) does so here, not in the cold phase or the first probe."""
    sessions = warmup_sessions(inputs.workload, inputs.seed, settings.warmup_requests)
    config = client_config(target, inputs, settings)
    started = time.perf_counter()
    waves: list[dict[str, Any]] = []
    width, sent = 1, 0
    async with Client(config) as client:
        while sent < len(sessions):
            wave = sessions[sent : sent + width]
            records = await Runner(client, LoadPlan(sessions=wave, concurrency=len(wave), seed=inputs.seed)).run()
            summary = summarize_run(records, inputs.slo.per_request)
            waves.append({"at_once": len(wave), "failed": summary["requests"]["failed"], "ttft_ms": summary["ttft_ms"]})
            sent += len(wave)
            width = min(2 * width, settings.warmup_concurrency)
    failed = sum(w["failed"] for w in waves)
    first, last = waves[0]["ttft_ms"].get("max"), waves[-1]["ttft_ms"].get("p50")
    detail = (
        f"{sent} requests in waves of {', '.join(str(w['at_once']) for w in waves)} at once in "
        f"{time.perf_counter() - started:.1f} s (none measured); TTFT of the first "
        f"{'-' if first is None else f'{first:.0f} ms'}, p50 of the last wave "
        f"{'-' if last is None else f'{last:.0f} ms'}"
    )
    evidence = {"waves": waves}
    if failed:
        return Check("warmup", "warn", f"{detail}; {failed} failed", evidence)
    return Check("warmup", "pass", detail, evidence)


def _point(p: Probe, summary: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "rate": p.rate,
        "verdict": p.verdict,
        "good": p.good,
        "judged": p.judged,
        "interval": list(p.interval),
        "why": p.why,
        "superseded": False,  # True: not believed, run again at the same rate (the next point)
        "summary": summary,
        "runtime_metrics": metrics,
    }


def _cold_warm_check(phases: dict[str, Any]) -> Check:
    cold, warm = phases["cold"]["summary"], phases["warm"]["summary"]

    def p50(s: dict[str, Any]) -> str:
        v = s["ttft_ms"]["p50"]
        return "-" if v is None else f"{v:.1f} ms"

    def hit(s: dict[str, Any]) -> str:
        v = s["cache_hit_pct"]
        return "not reported" if v is None else f"{v:.0f}%"

    detail = f"TTFT p50 cold {p50(cold)}, warm {p50(warm)}; prefix-cache hits cold {hit(cold)}, warm {hit(warm)}"
    failed = cold["requests"]["failed"] + warm["requests"]["failed"]
    if failed:
        return Check("cold_warm", "warn", f"{detail}; {failed} request(s) failed", phases)
    return Check("cold_warm", "pass", detail, phases)


def _knee_check(
    search: KneeSearch, points: list[dict[str, Any]], cdf_source: tuple[float, list[RequestRecord]] | None
) -> Check:
    result = search.result()
    evidence = {**result, "points": points}
    if cdf_source is not None:
        evidence["cdf"] = {"rate": cdf_source[0], **_cdfs(cdf_source[1])}
    knee = result["knee_rate"]
    if knee is None:
        why = points[0]["why"] if points and points[0]["why"] else ""
        first = f" (at {points[0]['rate']:g}/s: {points[0]['verdict']}{'; ' + why if why else ''})" if points else ""
        return Check("knee", "fail", f"no probed rate met the SLOs{first}; stopped: {result['stop_reason']}", evidence)
    above = result["lowest_non_pass"]
    bound = f", lowest rate not shown to meet them {above:g}/s" if above is not None else ""
    return Check(
        "knee",
        "pass",
        f"knee {knee:g} sessions/s{bound}; {len(points)} probes, stopped: {result['stop_reason']}",
        evidence,
    )


def _runtime_metrics_check(points: list[dict[str, Any]]) -> Check:
    runtime = [p["runtime_metrics"].get("runtime") for p in points if p["runtime_metrics"].get("runtime")]
    read = [r for r in runtime if r["series"]]
    if not points:
        return Check("runtime_metrics", "skip", "no probe ran")
    if not runtime:
        return Check("runtime_metrics", "skip", "the runtime runs inside the gateway; its series are the gateway's")
    if not read:
        errors = {r.get("error") for r in runtime if r.get("error")}
        return Check(
            "runtime_metrics", "warn", f"the runtime's /metrics gave none of the kept series ({errors or 'no error'})"
        )
    names = sorted({n for r in read for n in r["series"]})
    return Check("runtime_metrics", "pass", f"sampled {', '.join(names)}", {"series": names})
