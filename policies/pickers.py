"""Routing pickers: each orders every candidate it is given, best first, from the
candidates, their weighted totals (policies/scorers.py) and the `Decision`. They
never move saturated backends: the pipeline puts them last, once. The rotating
pickers carry a pool's `RouteState` from one decision to the next; nothing else
outlives a decision."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from policies.profiles import PickerName, Profile
from policies.views import BackendView

_MASK = (1 << 64) - 1


@dataclass(slots=True)
class RouteState:
    """One pool's routing memory: the round robin's turn, smooth weighted round robin's
    running counts by backend name."""

    turn: int = 0
    counts: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class Decision:
    """What a picker reads besides the candidates: the request's routing key (its
    prompt's start, or its session), the profile, and the pool's state. Not frozen:
    one is built per decision, and a frozen dataclass is slower to build."""

    key: str
    profile: Profile
    state: RouteState


Picker = Callable[[list[BackendView], list[float], Decision], list[BackendView]]


def round_robin(backends: list[BackendView], totals: list[float], d: Decision) -> list[BackendView]:
    """The ring, starting one further at each decision."""
    if not backends:
        return []
    start = d.state.turn % len(backends)
    d.state.turn += 1
    return backends[start:] + backends[:start]


def weighted(backends: list[BackendView], totals: list[float], d: Decision) -> list[BackendView]:
    """Smooth weighted round robin: a backend of weight 2 gets twice the picks,
    interleaved rather than in bursts; the rest follow by their running counts."""
    if not backends:
        return []
    counts = d.state.counts
    total = sum(b.weight for b in backends)
    for b in backends:
        counts[b.name] = counts.get(b.name, 0.0) + b.weight
    best = max(backends, key=lambda b: counts[b.name])
    counts[best.name] -= total
    rest = sorted((b for b in backends if b is not best), key=lambda b: -counts[b.name])
    return [best, *rest]


def load_score(b: BackendView) -> float:
    """Fewer requests per unit of weight is better; the runtime's own queue counts double."""
    queued = 0
    running = b.inflight
    if b.load is not None:
        queued = b.load.waiting or 0
        running = max(running, b.load.running or 0)
    return -(running + 2 * queued) / b.weight


def least_loaded(backends: list[BackendView], totals: list[float], d: Decision) -> list[BackendView]:
    return sorted(backends, key=load_score, reverse=True)


def rendezvous_score(key: str, b: BackendView) -> float:
    """Weighted highest-random-weight hashing: a key keeps its backend while the set
    changes, and only keys of a removed backend move."""
    digest = hashlib.blake2b(f"{key}\x00{b.name}".encode(), digest_size=8).digest()
    u = (int.from_bytes(digest, "big") + 1) / (2**64 + 1)  # in (0, 1)
    return -b.weight / math.log(u)


def prefix_affinity(backends: list[BackendView], totals: list[float], d: Decision) -> list[BackendView]:
    """Same prompt start, same backend (its prefix cache is warm there), unless that
    backend is saturated; then the least loaded first."""
    ranked = sorted(backends, key=lambda b: rendezvous_score(d.key, b), reverse=True)
    if ranked and ranked[0].saturated:
        return least_loaded(ranked, totals, d)
    return ranked


@lru_cache(maxsize=4096)
def _name_digest(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def key_digest(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def tie_rank(key: int, name: str) -> int:
    """Highest-random-weight rank of backend `name` for a key digest (splitmix64):
    stable across processes and versions, so replicas break ties alike."""
    z = (key ^ _name_digest(name)) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def over_bound(backends: list[BackendView], load_factor: float, load_floor: int = 1) -> list[bool]:
    """For each candidate: would one more request put it past its bounded-load share
    (and past `load_floor`)? The session's backend is exempt."""
    total = sum(b.inflight for b in backends) + 1
    weights = sum(b.weight for b in backends)
    return [
        not b.session_owner
        and b.inflight + 1 > max(load_floor, math.ceil(load_factor * total * b.weight / weights - 1e-9))
        for b in backends
    ]


def max_score(backends: list[BackendView], totals: list[float], d: Decision) -> list[BackendView]:
    """By total (to nine decimals), ties by rendezvous rank of the key, so that with no
    signal one prefix still warms one backend; those over the bounded-load share
    behind the rest, each group in order (the least loaded always fits)."""
    rounded = [round(t, 9) for t in totals]
    if len(set(rounded)) == len(rounded):  # no tie: no hashing needed
        order = sorted(range(len(backends)), key=lambda i: -rounded[i])
    else:
        digest = key_digest(d.key)
        order = sorted(range(len(backends)), key=lambda i: (-rounded[i], -tie_rank(digest, backends[i].name)))
    over = over_bound(backends, d.profile.load_factor, d.profile.load_floor)
    return [backends[i] for i in order if not over[i]] + [backends[i] for i in order if over[i]]


PICKERS: dict[PickerName, Picker] = {
    "round_robin": round_robin,
    "weighted": weighted,
    "least_loaded": least_loaded,
    "prefix_affinity": prefix_affinity,
    "max_score": max_score,
}
