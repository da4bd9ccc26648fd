"""Routing as a visible pipeline of small pure steps, each testable alone.

    capability -> health -> stale load -> saturation -> policy order -> saturated last

1. Capability: backends whose runtime lacks something the request needs are
   dropped; the reasons are kept so that, when none is left, the gateway can say
   which runtime lacks what (400 `unsupported_by_runtime`).
2. Health: unhealthy backends, and those the outlier detector ejected
   (policies/ejection.py), are dropped, unless that leaves none.
3. Stale load: a load snapshot too old to trust is forgotten, so neither the
   saturation check nor a policy's scores read it.
4. Saturation: each backend is marked by the pool's `SaturationDetector`
   (policies/saturation.py), the same definition admission uses.
5. The policy's order (`RoutingPolicy.order`): round robin, weighted, least
   loaded or prefix affinity. Policies may read `saturated`, never compute it.
   A weighted scoring profile (policies/scoring.py) replaces this step with
   scorers and a picker; the other steps are these.
6. Saturated last: a stable partition, applied once here and not by each policy.

The result is an ordered list of candidates: the first is the choice, the rest
are the failover order (tried only before the first byte reached the client).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from adapters.base import Capabilities, GenerationRequest, LoadSnapshot
from policies.saturation import DEFAULT_DETECTOR, SaturationDetector


@dataclass(slots=True)
class BackendView:
    """What routing knows about one backend at decision time. `saturated` is the
    pipeline's verdict (step 4), which replaces whatever a view came with; only a
    test of a policy alone sets it by hand. Not frozen, because one is built per
    backend per decision and a frozen dataclass takes three times as long to
    build; the steps never change a view, they replace it."""

    name: str
    weight: float = 1.0
    inflight: int = 0
    max_inflight: int | None = None
    healthy: bool = True
    load: LoadSnapshot | None = None  # its read_at says how old it is
    capabilities: Capabilities = Capabilities()
    adapter: str = "unknown"  # the runtime kind, named when it lacks a capability
    saturated: bool = False
    ejected: bool = False  # held out by the outlier detector (policies/ejection.py)
    # What the scorers (policies/scorers.py) read about this request on this backend:
    # the fraction of its leading prompt blocks found in the backend's approximate
    # index and in its KV-event index (None: no such index), and whether the
    # backend holds the request's conversation.
    prefix_approx: float | None = None
    prefix_precise: float | None = None
    session_owner: bool = False
    # The prefill backlog (policies/scorers.py `backlog`): the uncached prompt tokens of the
    # requests routed to this backend whose first event has not come back yet, and the
    # tokens this request would add to it here (its prompt less the blocks matched here;
    # None: not estimated, dispatch then adds nothing).
    backlog_tokens: int = 0
    prefill_tokens: int | None = None


def uncached_tokens(prompt_tokens: int, matched: float | None, head_blocks: int, block_tokens: int) -> int:
    """The prompt tokens a backend would have to compute: all of them less the leading
    blocks its index matched. `matched` is the fraction of the `head_blocks` blocks an
    index named (an index names a long prompt's head only, so the fraction is of the
    head, not of the prompt); None or no head: nothing is known to be cached."""
    if not matched or head_blocks <= 0:
        return max(0, prompt_tokens)
    return max(0, prompt_tokens - round(matched * head_blocks) * block_tokens)


@dataclass(frozen=True, slots=True)
class CapabilityGap:
    """One backend that cannot serve the request, and the feature it lacks."""

    backend: str
    adapter: str
    feature: str

    def __str__(self) -> str:
        return f"{self.backend} ({self.adapter}) does not support {self.feature}"


@dataclass(frozen=True, slots=True)
class RouteTimings:
    """How long each step of one routing decision took, in nanoseconds."""

    filter_ns: int = 0
    score_ns: int = 0
    pick_ns: int = 0

    @property
    def total_ns(self) -> int:
        return self.filter_ns + self.score_ns + self.pick_ns


@dataclass(frozen=True, slots=True)
class RouteResult:
    """The candidates in the order to try them, and the backends the capability
    filter removed (with why). A scoring profile also says each candidate's total
    score and how long the steps took."""

    candidates: list[BackendView]
    refused: list[CapabilityGap]
    scores: dict[str, float] = field(default_factory=dict)
    timings: RouteTimings | None = None

    @property
    def unsupported(self) -> bool:
        """No backend can serve the request because each lacks something it needs."""
        return not self.candidates and bool(self.refused)


class RoutingPolicy(Protocol):
    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        """All of `backends`, best first. `key` is the request's routing key."""
        ...


# ---- filters ---------------------------------------------------------------------


def missing_capability(caps: Capabilities, req: GenerationRequest) -> str | None:
    """The feature `req` needs that `caps` lacks (n > 1 is emulated, not needed)."""
    if req.kind == "completion" and not caps.completions:
        return "legacy completions (/v1/completions)"
    if req.tools and req.tool_choice != "none" and not caps.tools:
        return "tool calls"
    if req.sampling.logprobs and not caps.logprobs:
        return "logprobs"
    if req.response_format and not caps.structured_output:
        return "structured output (response_format)"
    return None


def capable(backends: list[BackendView], req: GenerationRequest) -> list[BackendView]:
    return [b for b in backends if missing_capability(b.capabilities, req) is None]


def capability_gaps(backends: list[BackendView], req: GenerationRequest) -> list[CapabilityGap]:
    gaps = []
    for b in backends:
        lack = missing_capability(b.capabilities, req)
        if lack is not None:
            gaps.append(CapabilityGap(b.name, b.adapter, lack))
    return gaps


def healthy(backends: list[BackendView]) -> list[BackendView]:
    """Healthy backends that are not ejected; failing that the healthy ones; when
    none is, all of them (a stale health view must not turn a brief blip into a
    hard outage: the request will fail over anyway)."""
    ok = [b for b in backends if b.healthy and not b.ejected]
    return ok or [b for b in backends if b.healthy] or list(backends)


def forget_stale_load(
    backends: list[BackendView], detector: SaturationDetector, now: float | None = None
) -> list[BackendView]:
    return [
        dataclasses.replace(b, load=None) if b.load is not None and detector.fresh(b.load, now) is None else b
        for b in backends
    ]


def mark_saturation(
    backends: list[BackendView], detector: SaturationDetector, now: float | None = None
) -> list[BackendView]:
    marked = []
    for b in backends:
        saturated = detector.check(b.inflight, b.max_inflight, b.load, now).saturated
        marked.append(b if b.saturated == saturated else dataclasses.replace(b, saturated=saturated))
    return marked


def saturated_last(backends: list[BackendView]) -> list[BackendView]:
    return [b for b in backends if not b.saturated] + [b for b in backends if b.saturated]


# ---- scorers (higher is better) ---------------------------------------------------------


def load_score(b: BackendView) -> float:
    """Fewer requests per unit of weight is better; the runtime's own queue counts too."""
    queued = 0
    running = b.inflight
    if b.load is not None:
        queued = b.load.waiting or 0
        running = max(running, b.load.running or 0)
    return -(running + 2 * queued) / b.weight


def rendezvous_score(key: str, b: BackendView) -> float:
    """Weighted highest-random-weight hashing: a key keeps its backend while the
    set changes, and only keys of a removed backend move."""
    digest = hashlib.blake2b(f"{key}\x00{b.name}".encode(), digest_size=8).digest()
    u = (int.from_bytes(digest, "big") + 1) / (2**64 + 1)  # in (0, 1)
    return -b.weight / math.log(u)


# ---- policies: each orders every backend it is given; saturation is the pipeline's ----


@dataclass
class RoundRobin:
    counter: itertools.count = field(default_factory=itertools.count)

    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        if not backends:
            return []
        start = next(self.counter) % len(backends)
        return backends[start:] + backends[:start]


@dataclass
class Weighted:
    """Smooth weighted round robin: a backend of weight 2 gets twice the picks,
    interleaved rather than in bursts."""

    current: dict[str, float] = field(default_factory=dict)

    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        if not backends:
            return []
        total = sum(b.weight for b in backends)
        for b in backends:
            self.current[b.name] = self.current.get(b.name, 0.0) + b.weight
        best = max(backends, key=lambda b: self.current[b.name])
        self.current[best.name] -= total
        rest = sorted((b for b in backends if b is not best), key=lambda b: -self.current[b.name])
        return [best, *rest]


@dataclass
class LeastLoaded:
    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        return sorted(backends, key=load_score, reverse=True)


@dataclass
class PrefixAffinity:
    """Same prompt prefix -> same backend (its prefix cache is warm there), unless
    that backend is saturated; then the least loaded one first."""

    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        ranked = sorted(backends, key=lambda b: rendezvous_score(key, b), reverse=True)
        if ranked and ranked[0].saturated:
            return LeastLoaded().order(ranked, key)
        return ranked


POLICIES: dict[str, Callable[[], RoutingPolicy]] = {
    "round_robin": RoundRobin,
    "weighted": Weighted,
    "least_loaded": LeastLoaded,
    "prefix_affinity": PrefixAffinity,
}


def make_policy(name: str) -> RoutingPolicy:
    return POLICIES[name]()


# ---- the pipeline ---------------------------------------------------------------------


def route(
    policy: RoutingPolicy,
    backends: list[BackendView],
    req: GenerationRequest,
    detector: SaturationDetector = DEFAULT_DETECTOR,
    now: float | None = None,
) -> RouteResult:
    """The steps of the module docstring, in order."""
    refused = capability_gaps(backends, req)
    usable = healthy(capable(backends, req))
    marked = mark_saturation(forget_stale_load(usable, detector, now), detector, now)
    ordered = policy.order(marked, prefix_key(req.messages, req.prompt))
    return RouteResult(saturated_last(ordered), refused)


def prefix_key(messages: list[dict] | None, prompt: object, chars: int = 512) -> str:
    """The routing key for prefix affinity: the start of the rendered conversation."""
    if messages:
        parts = []
        size = 0
        for m in messages:
            c = m.get("content")
            text = c if isinstance(c, str) else str(c)
            parts.append(f"{m.get('role')}:{text}")
            size += len(text)
            if size >= chars:
                break
        return "\n".join(parts)[:chars]
    if isinstance(prompt, str):
        return prompt[:chars]
    if isinstance(prompt, list):
        return ",".join(map(str, prompt[: chars // 4]))
    return ""
