"""Routing as filters -> scorers -> pick, each a small pure function.

The result is an ordered list of candidates: the first is the choice, the rest
are the failover order (tried only before the first byte reached the client).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass, field

from adapters.base import LoadSnapshot

# A runtime whose KV cache is this full is about to queue or preempt: prefer others.
KV_SATURATED = 0.95


@dataclass
class BackendView:
    """What routing knows about one backend at decision time."""

    name: str
    weight: float = 1.0
    inflight: int = 0
    max_inflight: int | None = None
    healthy: bool = True
    load: LoadSnapshot | None = None

    @property
    def has_capacity(self) -> bool:
        return self.max_inflight is None or self.inflight < self.max_inflight

    @property
    def saturated(self) -> bool:
        if not self.has_capacity:
            return True
        return bool(self.load and self.load.kv_usage is not None and self.load.kv_usage >= KV_SATURATED)


# ---- filters ---------------------------------------------------------------------


def healthy(backends: list[BackendView]) -> list[BackendView]:
    """Healthy backends; when none is, all of them (a stale health view must not
    turn a brief blip into a hard outage: the request will fail over anyway)."""
    ok = [b for b in backends if b.healthy]
    return ok or list(backends)


def unsaturated_first(backends: list[BackendView]) -> list[BackendView]:
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


# ---- policies --------------------------------------------------------------------------


@dataclass
class RoundRobin:
    counter: itertools.count = field(default_factory=itertools.count)

    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        if not backends:
            return []
        start = next(self.counter) % len(backends)
        rotated = backends[start:] + backends[:start]
        return unsaturated_first(rotated)


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
        return unsaturated_first([best, *rest])


@dataclass
class LeastLoaded:
    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        return unsaturated_first(sorted(backends, key=load_score, reverse=True))


@dataclass
class PrefixAffinity:
    """Same prompt prefix -> same backend (its prefix cache is warm there), unless
    that backend is saturated; then the least loaded one."""

    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        ranked = sorted(backends, key=lambda b: rendezvous_score(key, b), reverse=True)
        if ranked and ranked[0].saturated:
            ranked = LeastLoaded().order(ranked, key)
        return unsaturated_first(ranked)


POLICIES = {
    "round_robin": RoundRobin,
    "weighted": Weighted,
    "least_loaded": LeastLoaded,
    "prefix_affinity": PrefixAffinity,
}


def make_policy(name: str):
    return POLICIES[name]()


def route(policy, backends: list[BackendView], key: str) -> list[BackendView]:
    """Filters, then the policy's order."""
    return policy.order(healthy(backends), key)


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
