"""Stage 4, production: what a candidate does between an experiment and production,
through its gateway, judged by the runtime's own metrics and the gateway's:

- `cancel`: clients that leave mid-stream are freed: the runtime's running count
  (vLLM `vllm:num_requests_running`, SGLang `sglang:num_running_reqs`, TGI
  `tgi_batch_current_size`, llama.cpp `llamacpp:requests_processing`, with their
  waiting counts) and the gateway's in-flight gauges are back where they were within
  `settle_s`;
- `deadline`: a request whose `x-request-timeout` runs out is answered 504 and its
  upstream work is aborted (the same counts back);
- `overload`: a burst of `overload_requests` at once gets answers or 429/503 with
  Retry-After, never a hang, a 500 or a refusal without Retry-After;
- `readiness`: `/readyz` answers 200 within `readyz_timeout_s` during the burst;
- `rollback` (production_rollback.py): a config reload to `rollback_config` (or the
  backends renamed) and back, with no failed request while traffic runs;
- `replicas` (production_replicas.py): a pool of two instances of the runtime spreads
  sessions, keeps a session on one, and fails over with no failed request when one stops;
- `quota` (production_quota.py): a tenant over its quota is refused 429 with Retry-After
  while another is served.

The checks that change the config (the last three) share bakeoff/stages/reconfigure.py
and leave the candidate's config as they found it.

A runtime without a known running gauge (the native engine, TRT-LLM) is judged on the
gateway's gauges, and the check says so.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import httpx

from bakeoff.stages import Budget, Probe, bounded, error_text, user
from bakeoff.stages import production_quota as quota
from bakeoff.stages import production_replicas as replicas
from bakeoff.stages import production_rollback as rollback
from bakeoff.stages.production_settings import ALL_CHECKS, Settings
from bakeoff.verdict import CandidateTarget, Check, Outcome, StageResult

# The runtime's own gauges of requests it holds (running and waiting), by adapter kind.
RUNTIME_GAUGES = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
    "tgi": ("tgi_batch_current_size", "tgi_queue_size"),
    "llamacpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
}
GATEWAY_GAUGES = ("switchyard_inflight_requests", "switchyard_backend_inflight")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN)$")
POLL_S = 0.2
LONG_PROMPT = "Write a very long story about a freight train crossing the mountains at night."


async def run(target: CandidateTarget, settings: Settings, budget_s: float) -> StageResult:
    started = time.monotonic()
    budget = Budget(budget_s)
    chosen = [c for c in ALL_CHECKS if c in settings.checks]
    steps = [c for c in chosen if c != "readiness" or "overload" not in chosen]
    checks: list[Check] = []
    async with Probe(target, timeout_s=settings.request_timeout_s) as probe:
        for i, name in enumerate(steps):
            seconds = budget.share(len(steps) - i)
            if name in ("overload", "readiness"):
                both = await _bounded_pair(probe, settings, seconds, "overload" in chosen, "readiness" in chosen)
                checks += both
            else:
                checks.append(await bounded(name, partial(JUDGES[name], probe, settings), seconds))
    return StageResult("production", target.name, tuple(checks), round(time.monotonic() - started, 3))


# ---- the running counts ----------------------------------------------------------------


def gauge_sum(text: str, names: tuple[str, ...]) -> float | None:
    """The sum of the samples of `names` in Prometheus text (None: none of them is there)."""
    values = [float(m.group(3)) for line in text.splitlines() if (m := SAMPLE.match(line)) and m.group(1) in names]
    return sum(values) if values else None


class Counts:
    """The runtime's and the gateway's counts of requests held, read from their /metrics."""

    def __init__(self, probe: Probe) -> None:
        target = probe.target
        self.probe = probe
        self.runtime_names = RUNTIME_GAUGES.get(target.runtime)
        root = (target.runtime_url or "").rstrip("/").removesuffix("/v1")
        self.runtime_url = root + "/metrics" if root and self.runtime_names else None

    async def read(self) -> dict[str, float | None]:
        """Both counts, read at once (on a slow machine a short stream may end between two
        reads made one after the other)."""
        gateway, runtime = await asyncio.gather(self._gateway(), self._runtime())
        return {"runtime": runtime, "gateway": gateway}

    async def _gateway(self) -> float | None:
        resp = await self.probe.client.get("/metrics")
        return gauge_sum(resp.text, GATEWAY_GAUGES) if resp.status_code == 200 else None

    async def _runtime(self) -> float | None:
        if self.runtime_url is None or self.runtime_names is None:
            return None
        try:  # a client of its own: the gateway's API key is not the runtime's business
            async with httpx.AsyncClient(timeout=self.probe.client.timeout) as client:
                resp = await client.get(self.runtime_url)
        except httpx.TransportError:
            return None  # not judged on it: the detail says so (`watched`)
        return gauge_sum(resp.text, self.runtime_names) if resp.status_code == 200 else None

    async def settle(self, baseline: dict[str, float | None], seconds: float) -> dict[str, float | None]:
        """The counts once each is back at `baseline` or `seconds` have passed."""
        deadline = time.monotonic() + seconds
        now = await self.read()
        while _above(now, baseline) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            now = await self.read()
        return now

    def watched(self, counts: dict[str, float | None]) -> str:
        """Which counts were read, for a check's detail."""
        runtime = f"the runtime's {' + '.join(self.runtime_names or ())}"
        if counts["runtime"] is not None and counts["gateway"] is not None:
            return f"{runtime} and the gateway's in-flight gauges"
        if counts["runtime"] is not None:
            return f"{runtime} only (the gateway's /metrics is not on its API listener)"
        if self.runtime_names is None:
            return f"the gateway's in-flight gauges only (no running gauge known for {self.probe.target.runtime})"
        return f"the gateway's in-flight gauges only (the runtime's {self.runtime_url} could not be read)"


def _above(now: dict[str, float | None], baseline: dict[str, float | None]) -> list[str]:
    """Which counts are above their baseline (a count that cannot be read is not judged)."""
    return [k for k, v in now.items() if v is not None and baseline.get(k) is not None and v > (baseline[k] or 0)]


Gauges = dict[str, float | None]


def _freed(name: str, counts: Counts, baseline: Gauges, during: Gauges | None, after: Gauges, what: str) -> Check:
    """`during` None: the request is known to have run (it met its deadline), no rise is needed."""
    evidence = {"before": baseline, "during": during, "after": after}
    if during is not None and not _above(during, baseline):
        why = f"no count rose while {what} ({counts.watched(baseline)}): their release cannot be judged"
        return Check(name, "skip", why, evidence)
    held = _above(after, baseline)
    if held:
        where = " and ".join(f"the {k} still counts {after[k] or 0:g} (was {baseline[k] or 0:g})" for k in held)
        return Check(name, "fail", f"not freed: {where} after {what}", evidence)
    return Check(name, "pass", f"freed after {what}: {counts.watched(baseline)} back where they were", evidence)


# ---- cancel and deadline ---------------------------------------------------------------


async def ignore_eos_taken(probe: Probe) -> dict[str, Any]:
    """`{"ignore_eos": True}` where the runtime takes it (asked with one token), else
    nothing (TGI refuses it): answers then run to their `max_tokens`, however early the
    model would stop."""
    taken = await probe.chat(user("Say hello."), max_tokens=1, ignore_eos=True)
    return {} if taken.status_code == 400 else {"ignore_eos": True}


async def _long_body(probe: Probe, settings: Settings, stream: bool) -> dict[str, Any]:
    """A long answer to cut: `answer_tokens`, kept running by `ignore_eos` where taken."""
    body = {"model": probe.target.model, "messages": user(LONG_PROMPT), "max_tokens": settings.answer_tokens}
    return {**body, **await ignore_eos_taken(probe), "stream": stream}


async def _open(probe: Probe, streams: AsyncExitStack, body: dict[str, Any]) -> tuple[int, str, AsyncIterator[str]]:
    """One stream opened and read to its first event: (status, error, its line iterator)."""
    resp = await streams.enter_async_context(probe.client.stream("POST", "/v1/chat/completions", json=body))
    if resp.status_code != 200:
        await resp.aread()
        return resp.status_code, error_text(resp), resp.aiter_lines()
    lines = resp.aiter_lines()
    return (200, "", lines) if await _started(lines) else (200, "a stream ended before its first event", lines)


async def _cancel(probe: Probe, settings: Settings) -> Check:
    counts = Counts(probe)
    baseline = await counts.settle(await counts.read(), settings.settle_s)
    body = await _long_body(probe, settings, stream=True)
    # The streams are opened together and the counts read as soon as each has its first
    # event, so on a slow machine the answers are still running when they are read. Each
    # stream's line iterator is kept until the cut: one dropped after `break` would be
    # finalized and close its connection at once, before the counts are read.
    async with AsyncExitStack() as streams:
        opened = await asyncio.gather(*(_open(probe, streams, body) for _ in range(settings.cancel_streams)))
        for status, error, _ in opened:
            if status != 200:
                outcome: Outcome = "fail" if status >= 500 else "skip"
                return Check("cancel", outcome, f"could not start a stream to cut: {error}")
            if error:
                return Check("cancel", "fail", error)
        during = await counts.read()
    # Leaving the stack closed every stream's connection: the clients have left.
    after = await counts.settle(baseline, settings.settle_s)
    what = f"{settings.cancel_streams} streams of {settings.answer_tokens} tokens were cut mid-answer"
    return _freed("cancel", counts, baseline, during, after, what)


async def _started(lines: AsyncIterator[str]) -> bool:
    """Read up to the stream's first event (False: it ended without one)."""
    async for line in lines:
        if line.startswith("data:"):
            return True
    return False


async def _deadline(probe: Probe, settings: Settings) -> Check:
    counts = Counts(probe)
    baseline = await counts.settle(await counts.read(), settings.settle_s)
    headers = {"x-request-timeout": f"{settings.deadline_s:g}"}
    body = await _long_body(probe, settings, stream=False)
    resp = await probe.client.post("/v1/chat/completions", json=body, headers=headers)
    if resp.status_code == 200:
        why = f"answered within its {settings.deadline_s:g} s deadline: nothing to judge (raise answer_tokens)"
        return Check("deadline", "skip", why)
    if resp.status_code != 504:
        return Check("deadline", "fail", f"a deadline that ran out answered {error_text(resp)}, not 504")
    after = await counts.settle(baseline, settings.settle_s)
    return _freed("deadline", counts, baseline, None, after, f"a {settings.deadline_s:g} s deadline ran out (504)")


# ---- overload and readiness ------------------------------------------------------------


async def _one_of_burst(probe: Probe, settings: Settings, extra: dict[str, Any]) -> str:
    asked = probe.chat(user("Describe a switchyard."), max_tokens=settings.overload_tokens, **extra)
    try:
        async with asyncio.timeout(settings.request_timeout_s):
            resp = await asked
    except TimeoutError:
        return "hang"
    except httpx.TransportError as exc:
        return f"connection: {type(exc).__name__}"
    if resp.status_code == 200:
        return "answered"
    if resp.status_code in (429, 503):
        return f"{resp.status_code} with Retry-After" if resp.headers.get("retry-after") else f"{resp.status_code}"
    return f"{resp.status_code}"


async def _watch_readiness(probe: Probe, settings: Settings, stop: asyncio.Event) -> list[str]:
    seen: list[str] = []
    while not stop.is_set():
        try:
            resp = await probe.client.get("/readyz", timeout=settings.readyz_timeout_s)
            seen.append("ready" if resp.status_code == 200 else f"{resp.status_code}")
        except httpx.TimeoutException:
            seen.append(f"no answer within {settings.readyz_timeout_s:g} s")
        except httpx.TransportError as exc:
            seen.append(f"connection: {type(exc).__name__}")
        await asyncio.sleep(POLL_S)
    return seen


async def _overload(probe: Probe, settings: Settings, overload: bool, readiness: bool) -> list[Check]:
    # Every answer runs to `overload_tokens` (ignore_eos where taken): the requests let in
    # hold their places while the rest of the burst arrives, however fast the model is.
    extra = await ignore_eos_taken(probe)
    stop = asyncio.Event()
    watcher = asyncio.ensure_future(_watch_readiness(probe, settings, stop))
    try:
        burst = (_one_of_burst(probe, settings, extra) for _ in range(settings.overload_requests))
        outcomes = Counter(await asyncio.gather(*burst))
    finally:
        stop.set()
        ready = Counter(await watcher)
    out = []
    if overload:
        out.append(_overload_verdict(settings, outcomes))
    if readiness:
        bad = {k: n for k, n in ready.items() if k != "ready"}
        evidence = {"readyz": dict(ready)}
        if not ready:
            out.append(Check("readiness", "skip", "no /readyz probe completed during the burst", evidence))
        elif bad:
            out.append(Check("readiness", "fail", f"/readyz during the burst: {dict(bad)}", evidence))
        else:
            out.append(
                Check("readiness", "pass", f"/readyz answered 200 {ready['ready']} times during the burst", evidence)
            )
    return out


def _overload_verdict(settings: Settings, outcomes: Counter[str]) -> Check:
    evidence = {"requests": settings.overload_requests, "outcomes": dict(outcomes)}
    good = ("answered", "429 with Retry-After", "503 with Retry-After")
    bad = {k: n for k, n in outcomes.items() if k not in good}
    if bad:
        return Check("overload", "fail", f"a burst of {settings.overload_requests} got {dict(bad)}", evidence)
    if outcomes["answered"] == settings.overload_requests:
        why = f"not overloaded: all {settings.overload_requests} answered (raise overload_requests to judge)"
        return Check("overload", "skip", why, evidence)
    refused = settings.overload_requests - outcomes["answered"]
    return Check("overload", "pass", f"{refused} refused with Retry-After, the rest answered", evidence)


async def _bounded_pair(
    probe: Probe, settings: Settings, seconds: float, overload: bool, readiness: bool
) -> list[Check]:
    out: list[list[Check]] = []

    async def judge() -> Check:
        out.append(await _overload(probe, settings, overload, readiness))
        return Check("overload", "pass", "")

    single = await bounded("overload" if overload else "readiness", judge, seconds)
    if out:
        return out[0]
    names = (["overload"] if overload else []) + (["readiness"] if readiness else [])
    return [Check(n, single.outcome, single.detail) for n in names]


JUDGES = {
    "cancel": _cancel,
    "deadline": _deadline,
    "rollback": rollback.judge,
    "replicas": replicas.judge,
    "quota": quota.judge,
}
