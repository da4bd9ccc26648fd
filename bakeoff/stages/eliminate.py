"""Stage 1, eliminate: what cannot serve the workload goes first.

Three kinds of checks, all through the candidate's gateway:
- `served`: `GET /v1/models` lists the plan's model (with the admin key, the backends the
  gateway's config in force gives it are recorded beside: adapter, options);
- each feature the plan requires (`features`), probed by one request that uses it
  (`feature:<name>`: a stream to its `[DONE]`, a forced tool call, a json_schema answer,
  logprobs, embeddings, a prompt of `long_context_tokens`); a refusal or a malformed
  answer is a `fail`;
- the conformance suite's profiles the plan requires (`profiles`), run by its own runner
  (conformance/runner.py) against the gateway, with the required features as the
  target's declared capabilities (so checks of features the plan does not need are
  `na`). Each failed or errored MUST is a `fail` named `conformance:<check id>`, each
  failed SHOULD a `warn`; `conformance` sums the run up (skipped MUSTs: `warn`).

Any `fail` eliminates the candidate.
"""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any, Literal

from pydantic import Field, field_validator

from bakeoff.stages import Budget, Probe, StageSettings, bounded, error_text, first_choice, usage_of, user
from bakeoff.verdict import CandidateTarget, Check, Outcome, StageResult
from conformance.catalog import select
from conformance.check import PROFILES
from conformance.context import Context
from conformance.result import CheckResult, Level, Status
from conformance.runner import run_check
from conformance.target import Target

Feature = Literal["streaming", "tools", "structured_output", "logprobs", "embeddings", "long_context"]
# The plan's features that the conformance suite also declares (conformance/capabilities.py).
CONFORMANCE_FEATURES = {"tools": "tools", "structured_output": "structured_output", "embeddings": "embeddings"}
# Tokens a chat template may add around the long-context probe's words.
TEMPLATE_ROOM = 64


class Settings(StageSettings):
    features: list[Feature] = Field(default_factory=list)
    profiles: list[str] = Field(default_factory=lambda: ["core"])
    long_context_tokens: int = Field(8192, ge=TEMPLATE_ROOM * 2)
    only: list[str] | None = None  # conformance check ids (or prefixes) to narrow the profiles to
    check_timeout_s: float = Field(120.0, gt=0)

    @field_validator("profiles")
    @classmethod
    def _known_profiles(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(PROFILES))
        if unknown:
            raise ValueError(f"unknown conformance profile {', '.join(unknown)}; choose from {', '.join(PROFILES)}")
        return value


async def run(target: CandidateTarget, settings: Settings, budget_s: float) -> StageResult:
    started = time.monotonic()
    budget = Budget(budget_s)
    checks: list[Check] = []
    async with Probe(target) as probe:
        checks.append(await bounded("served", partial(_served, probe), min(budget.left() / 8, 30.0)))
        # Features take a small share: the conformance run keeps most of the budget.
        for i, feature in enumerate(settings.features):
            share = min(budget.left() / 4, budget.share(len(settings.features) - i + 1))
            checks.append(await bounded(f"feature:{feature}", partial(PROBES[feature], probe, settings), share))
    checks += await conformance(target, settings, budget)
    return StageResult("eliminate", target.name, tuple(checks), round(time.monotonic() - started, 3))


# ---- the feature probes -------------------------------------------------------------


async def _served(probe: Probe) -> Check:
    target = probe.target
    resp = await probe.client.get("/v1/models")
    if resp.status_code != 200:
        return Check("served", "fail", f"GET /v1/models answered {error_text(resp)}")
    listed = [m.get("id") for m in resp.json().get("data") or [] if isinstance(m, dict)]
    evidence: dict[str, Any] = {"models": listed}
    if target.admin_key:
        shown = await probe.client.get("/admin/config", headers=probe.admin_headers)
        if shown.status_code == 200:
            model = (shown.json().get("config", {}).get("models") or {}).get(target.model) or {}
            keep = ("name", "adapter", "options", "max_inflight")
            evidence["backends"] = [{k: b.get(k) for k in keep if k in b} for b in model.get("backends") or []]
    if target.model not in listed:
        return Check("served", "fail", f"the gateway does not list {target.model!r} (it lists {listed})", evidence)
    return Check("served", "pass", f"the gateway lists {target.model!r}", evidence)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ANSWER_SCHEMA = {
    "name": "probe",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    },
}


async def _streaming(probe: Probe, settings: Settings) -> Check:
    body = {"model": probe.target.model, "messages": user("Say hello."), "max_tokens": 8, "stream": True}
    async with probe.client.stream("POST", "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            await resp.aread()
            return Check("feature:streaming", "fail", f"a stream was refused: {error_text(resp)}")
        kind = resp.headers.get("content-type", "")
        events = [line[5:].strip() async for line in resp.aiter_lines() if line.startswith("data:")]
    if not kind.startswith("text/event-stream") or len(events) < 2 or events[-1] != "[DONE]":
        why = f"not an event stream ending with [DONE] ({kind or 'no content-type'}, {len(events)} events)"
        return Check("feature:streaming", "fail", why)
    problem = _stream_problem(events[:-1])
    if problem is not None:
        return Check("feature:streaming", "fail", problem)
    return Check("feature:streaming", "pass", f"{len(events) - 1} chunks, then [DONE]")


def _stream_problem(chunks: list[str]) -> str | None:
    """What makes a stream that reached [DONE] still not a good answer: a chunk that is not
    JSON, an error event on the way, or no choice ever finished."""
    finished = False
    for chunk in chunks:
        try:
            data = json.loads(chunk)
        except ValueError:
            return f"a chunk is not JSON: {chunk[:80]!r}"
        if not isinstance(data, dict):
            return f"a chunk is not a JSON object: {chunk[:80]!r}"
        if "error" in data:
            return f"the stream carried an error before [DONE]: {str(data['error'])[:120]}"
        finished = finished or any(isinstance(c, dict) and c.get("finish_reason") for c in data.get("choices") or ())
    return None if finished else "no choice finished before [DONE]"


async def _tools(probe: Probe, settings: Settings) -> Check:
    resp = await probe.chat(
        user("What is the weather in Paris?"),
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        temperature=0,
    )
    if resp.status_code != 200:
        return Check("feature:tools", "fail", f"a forced tool call was refused: {error_text(resp)}")
    calls = (first_choice(resp).get("message") or {}).get("tool_calls") or []
    names = [c.get("function", {}).get("name") for c in calls if isinstance(c, dict)]
    if names != ["get_weather"]:
        return Check("feature:tools", "fail", f"a forced call to get_weather answered calls {names}")
    arguments = calls[0]["function"].get("arguments")
    if not isinstance(_json_object(arguments), dict):
        return Check("feature:tools", "fail", f"the call's arguments are not a JSON object: {arguments!r:.120}")
    return Check("feature:tools", "pass", "a forced call to get_weather with JSON arguments")


async def _structured(probe: Probe, settings: Settings) -> Check:
    resp = await probe.chat(
        user("Answer in one word: what colour is the sky?"),
        response_format={"type": "json_schema", "json_schema": ANSWER_SCHEMA},
        max_tokens=64,
        temperature=0,
    )
    name = "feature:structured_output"
    if resp.status_code != 200:
        return Check(name, "fail", f"a json_schema answer was refused: {error_text(resp)}")
    content = (first_choice(resp).get("message") or {}).get("content")
    doc = _json_object(content)
    if not isinstance(doc, dict) or set(doc) != {"answer"} or not isinstance(doc["answer"], str):
        return Check(name, "fail", f"the answer does not match the schema: {content!r:.120}")
    return Check(name, "pass", "a json_schema answer valid against its schema")


async def _logprobs(probe: Probe, settings: Settings) -> Check:
    resp = await probe.chat(user("Say hello."), logprobs=True, top_logprobs=2, max_tokens=4, temperature=0)
    if resp.status_code != 200:
        return Check("feature:logprobs", "fail", f"logprobs were refused: {error_text(resp)}")
    entries = (first_choice(resp).get("logprobs") or {}).get("content") or []
    good = [e for e in entries if isinstance(e, dict) and "token" in e and isinstance(e.get("logprob"), int | float)]
    if not entries or len(good) != len(entries):
        return Check("feature:logprobs", "fail", f"no per-token logprobs in the answer ({len(entries)} entries)")
    return Check("feature:logprobs", "pass", f"{len(entries)} tokens with their logprobs")


async def _embeddings(probe: Probe, settings: Settings) -> Check:
    resp = await probe.post("/v1/embeddings", {"input": ["a railway switchyard", "a freight train"]})
    if resp.status_code != 200:
        return Check("feature:embeddings", "fail", f"embeddings were refused: {error_text(resp)}")
    data = resp.json().get("data") or []
    vectors = [v for d in data if isinstance(d, dict) and isinstance(v := d.get("embedding"), list) and v]
    if len(vectors) != 2 or len(data) != 2:
        return Check("feature:embeddings", "fail", f"two inputs answered {len(vectors)} vectors")
    return Check("feature:embeddings", "pass", f"two vectors of {len(vectors[0])} dimensions")


async def _long_context(probe: Probe, settings: Settings) -> Check:
    """A prompt of `long_context_tokens` less room for the template: one token or more per word."""
    words = settings.long_context_tokens - TEMPLATE_ROOM
    text = " ".join(("switch", "yard", "train", "track")[i % 4] for i in range(words))
    resp = await probe.chat(user(text), max_tokens=1)
    name = "feature:long_context"
    if resp.status_code != 200:
        return Check(name, "fail", f"a prompt of {words} words was refused: {error_text(resp)}", {"words": words})
    prompt_tokens = usage_of(resp).get("prompt_tokens")
    return Check(name, "pass", f"a prompt of {prompt_tokens} tokens was served", {"prompt_tokens": prompt_tokens})


PROBES = {
    "streaming": _streaming,
    "tools": _tools,
    "structured_output": _structured,
    "logprobs": _logprobs,
    "embeddings": _embeddings,
    "long_context": _long_context,
}


def _json_object(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


# ---- the conformance profiles ---------------------------------------------------------


def conformance_target(target: CandidateTarget, settings: Settings) -> Target:
    """The gateway as the suite sees it: the plan's features are its declared capabilities."""
    declared = {CONFORMANCE_FEATURES[f] for f in settings.features if f in CONFORMANCE_FEATURES}
    if "responses" in settings.profiles:
        declared.add("responses")
    return Target(
        base_url=target.gateway_url,
        model=target.model,
        name=f"gateway/{target.name}",
        api_key=target.api_key,
        metrics_url=target.gateway_url.rstrip("/") + "/metrics",
        capabilities=frozenset(declared),
        timeout_s=settings.check_timeout_s,
    )


async def conformance(target: CandidateTarget, settings: Settings, budget: Budget) -> list[Check]:
    """The suite's checks one after another (its runner, its `run_check`), each within what
    is left of the budget; those the budget leaves no time for are counted as not run."""
    chosen = select(settings.profiles, settings.only)
    suite = conformance_target(target, settings)
    ctx = Context(suite)
    results: list[CheckResult] = []
    not_run: list[str] = []
    try:
        for check in chosen:
            seconds = min(settings.check_timeout_s, budget.left())
            if seconds < 1.0:
                not_run.append(check.id)
                continue
            result = await run_check(check, ctx, seconds)
            if result.status is Status.ERROR and seconds < settings.check_timeout_s and budget.left() < 1.0:
                not_run.append(check.id)  # cut by the stage's budget, not by its own timeout: no verdict
                continue
            results.append(result)
    finally:
        await ctx.aclose()
    return [*_named(results), _summary(settings, results, not_run)]


def _named(results: list[CheckResult]) -> list[Check]:
    out = []
    for r in results:
        if r.status in (Status.FAIL, Status.ERROR):
            outcome: Outcome = "fail" if r.level is Level.MUST else "warn"
            evidence = {"level": str(r.level), "status": str(r.status), "evidence": r.evidence[:1]}
            out.append(Check(f"conformance:{r.id}", outcome, f"{r.level} {r.status}: {r.message}", evidence))
    return out


def _summary(settings: Settings, results: list[CheckResult], not_run: list[str]) -> Check:
    counts: dict[str, int] = {}
    for r in results:
        counts[f"{r.level} {r.status}"] = counts.get(f"{r.level} {r.status}", 0) + 1
    failed = [r.id for r in results if r.level is Level.MUST and r.status in (Status.FAIL, Status.ERROR)]
    skipped = [r.id for r in results if r.level is Level.MUST and r.status is Status.SKIP]
    evidence = {"profiles": settings.profiles, "counts": counts, "not_run": not_run, "must_skipped": skipped}
    profiles = ", ".join(settings.profiles)
    if failed:
        return Check("conformance", "fail", f"MUST failed ({profiles}): {', '.join(failed)}", evidence)
    if not_run:
        return Check("conformance", "skip", f"{len(not_run)} checks not run: the budget was spent", evidence)
    if skipped:
        return Check("conformance", "warn", f"no MUST failed; MUSTs skipped: {', '.join(skipped)}", evidence)
    passed = counts.get("MUST pass", 0)
    return Check("conformance", "pass", f"every MUST that applies passed ({passed}, profiles {profiles})", evidence)
