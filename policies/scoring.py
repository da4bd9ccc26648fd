"""Routing by a weighted scoring profile: filters, then scorers, then a picker.

    capability -> health and ejection -> stale load -> saturation     (policies/routing.py)
    -> weighted scores (policies/scorers.py) -> pick -> saturated last

The filters are the ones every policy shares. Each scorer gives each candidate a
score in [0, 1]; the profile's weights add them into one total per candidate.
The picker orders the candidates by total, best first, and then:

* Ties are broken by rendezvous hashing of the request's key (its prompt prefix),
  so that with no signal at all (a cold start) one prefix still goes to one
  backend, whose cache it then warms, and only a removed backend's keys move.
  The hash is stable across gateway processes, so replicas agree.
* Bounded load: a candidate whose in-flight count would pass `load_factor` times
  its share of the pool's in-flight requests (counting this one, weighted,
  rounded up) goes behind those that would not. One hot prefix can then hold at
  most 1.25 times its share of a backend (with the default factor) before the
  next-best backend takes the overflow. The least loaded backend always fits, so
  this never empties the front of the list. The backend that holds the request's
  conversation is exempt: a session stays put until its backend is saturated.
  `load_floor`: below this many in flight a backend is never past its share
  (default 1, no floor). With few requests in flight the share is mostly
  rounding (three backends, three in flight: twice the share is 2), while any
  batching runtime takes a handful of requests at once without strain.

Each step is timed (`RouteResult.timings`) with the monotonic nanosecond clock,
which costs well under a microsecond per decision.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from adapters.base import GenerationRequest
from policies.routing import (
    BackendView,
    CapabilityGap,
    RouteResult,
    RouteTimings,
    forget_stale_load,
    healthy,
    mark_saturation,
    missing_capability,
    saturated_last,
)
from policies.saturation import DEFAULT_DETECTOR, SaturationDetector
from policies.scorers import BLENDED, SCORERS, filled

DEFAULT_LOAD_FACTOR = 1.25
_MASK = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class ScoringProfile:
    """Scorer name -> weight (a weight of 0 leaves the scorer out), and the
    bounded-load factor of the picker."""

    weights: Mapping[str, float] = field(default_factory=lambda: dict(BLENDED))
    load_factor: float = DEFAULT_LOAD_FACTOR
    load_floor: int = 1

    def __post_init__(self) -> None:
        unknown = sorted(set(self.weights) - set(SCORERS))
        if unknown:
            raise ValueError(f"unknown scorers {unknown}; known: {sorted(SCORERS)}")
        if any(w < 0 or not math.isfinite(w) for w in self.weights.values()):
            raise ValueError("scorer weights must be finite and not negative")
        if self.load_factor < 1:
            raise ValueError("load_factor must be at least 1 (1 = never above the mean)")
        if self.load_floor < 1:
            raise ValueError("load_floor must be at least 1 (1 = no floor)")

    @property
    def active(self) -> list[tuple[str, float]]:
        return [(name, w) for name, w in self.weights.items() if w > 0]

    def uses(self, *scorers: str) -> bool:
        """Whether any of `scorers` has a weight, so the pool knows which views to fill."""
        return any(self.weights.get(name, 0) > 0 for name in scorers)


def total_scores(profile: ScoringProfile, backends: list[BackendView], detector: SaturationDetector) -> list[float]:
    """Each candidate's weighted sum of its scores."""
    totals = [0.0] * len(backends)
    for name, w in profile.active:
        for i, s in enumerate(filled(SCORERS[name](backends, detector))):
            totals[i] += w * s
    return totals


@lru_cache(maxsize=4096)
def _name_digest(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def key_digest(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def tie_rank(key: int, name: str) -> int:
    """Highest-random-weight rank of backend `name` for a key digest (splitmix64)."""
    z = (key ^ _name_digest(name)) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def over_bound(backends: list[BackendView], load_factor: float, load_floor: int = 1) -> list[bool]:
    """For each candidate: would one more request put it past its bounded-load share
    (and past `load_floor`)?"""
    total = sum(b.inflight for b in backends) + 1
    weights = sum(b.weight for b in backends)
    return [
        not b.session_owner
        and b.inflight + 1 > max(load_floor, math.ceil(load_factor * total * b.weight / weights - 1e-9))
        for b in backends
    ]


def pick(
    backends: list[BackendView], totals: list[float], key: str, load_factor: float, load_floor: int = 1
) -> list[BackendView]:
    """All candidates, best first: by total, ties by rendezvous rank of `key`, those
    over the bounded-load share behind the rest (each group keeps its order)."""
    rounded = [round(t, 9) for t in totals]
    if len(set(rounded)) == len(rounded):  # no tie: no hashing needed
        order = sorted(range(len(backends)), key=lambda i: -rounded[i])
    else:
        digest = key_digest(key)
        order = sorted(range(len(backends)), key=lambda i: (-rounded[i], -tie_rank(digest, backends[i].name)))
    over = over_bound(backends, load_factor, load_floor)
    return [backends[i] for i in order if not over[i]] + [backends[i] for i in order if over[i]]


def route_scored(
    profile: ScoringProfile,
    backends: list[BackendView],
    req: GenerationRequest,
    key: str,
    detector: SaturationDetector = DEFAULT_DETECTOR,
    now: float | None = None,
) -> RouteResult:
    """The steps of the module docstring, in order; `key` is the tie-break key."""
    now = time.time() if now is None else now
    t0 = time.perf_counter_ns()
    refused, capable = [], []
    for b in backends:
        lack = missing_capability(b.capabilities, req)
        if lack is None:
            capable.append(b)
        else:
            refused.append(CapabilityGap(b.name, b.adapter, lack))
    usable = healthy(capable)
    marked = mark_saturation(forget_stale_load(usable, detector, now), detector, now)
    t1 = time.perf_counter_ns()
    totals = total_scores(profile, marked, detector)
    t2 = time.perf_counter_ns()
    ordered = saturated_last(pick(marked, totals, key, profile.load_factor, profile.load_floor))
    t3 = time.perf_counter_ns()
    return RouteResult(
        ordered,
        refused,
        scores={b.name: total for b, total in zip(marked, totals)},
        timings=RouteTimings(t1 - t0, t2 - t1, t3 - t2),
    )
