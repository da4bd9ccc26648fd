"""Routing scorers: each a small pure function of the candidate views.

A scorer gives each candidate a score in [0, 1], higher is better, or None where it
has no signal (no queue reported, a load reading too old, no prefix index). None
takes the mean of the others' scores, so a missing signal neither helps nor hurts.
A profile (policies/profiles.py) weighs them; docs/architecture.md ("Routing") says
what each reads and why the named profiles weigh them as they do.
"""

from __future__ import annotations

from collections.abc import Callable

from policies.saturation import SaturationDetector
from policies.views import BackendView

# The excess of prefill to wait for that scores 0: about a cold prefill of a long shared system prompt.
BACKLOG_SCALE_TOKENS = 512.0

Scorer = Callable[[list[BackendView], SaturationDetector], list[float | None]]


def queue(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    """The runtime's waiting requests: 0 scores 1, the saturation threshold or more 0."""
    limit = detector.queue_depth
    return [
        None if b.load is None or b.load.waiting is None else 1.0 - min(max(b.load.waiting, 0), limit) / limit
        for b in backends
    ]


def kv(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    """The runtime's KV-cache use: empty scores 1, the saturation threshold or more 0."""
    limit = detector.kv_cache_utilization
    return [
        None if b.load is None or b.load.kv_usage is None else 1.0 - min(max(b.load.kv_usage, 0.0), limit) / limit
        for b in backends
    ]


def inflight(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    """The gateway's own in-flight requests per unit of weight, as (least + 1) / (x + 1):
    exact and instant, where the runtime's readings are up to 2 s old."""
    per_weight = [b.inflight / b.weight for b in backends]
    least = min(per_weight, default=0.0)
    return [(least + 1.0) / (x + 1.0) for x in per_weight]


def backlog(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    """The prefill this request would wait for there, its own included, per unit of weight,
    against the least: 1 - min(x - least, S) / S. In-flight counts cannot tell a backend
    computing a cold prompt from one decoding a warm one; this can."""
    wait = [(b.backlog_tokens + (b.prefill_tokens or 0)) / b.weight for b in backends]
    least = min(wait, default=0.0)
    return [1.0 - min(x - least, BACKLOG_SCALE_TOKENS) / BACKLOG_SCALE_TOKENS for x in wait]


def prefix_approx(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    return [b.prefix_approx for b in backends]


def prefix_precise(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    return [b.prefix_precise for b in backends]


def prefix(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    """The precise match where the backend publishes KV events, the approximate one elsewhere."""
    return [b.prefix_approx if b.prefix_precise is None else b.prefix_precise for b in backends]


def session(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    return [1.0 if b.session_owner else 0.0 for b in backends]


def weight(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    """The configured static weight, relative to the largest."""
    heaviest = max((b.weight for b in backends), default=1.0)
    return [b.weight / heaviest for b in backends]


SCORERS: dict[str, Scorer] = {
    "queue": queue,
    "kv": kv,
    "inflight": inflight,
    "backlog": backlog,
    "prefix": prefix,
    "prefix_approx": prefix_approx,
    "prefix_precise": prefix_precise,
    "session": session,
    "weight": weight,
}


def filled(scores: list[float | None]) -> list[float]:
    """`scores` with each None replaced by the mean of the known ones (0 when none is known)."""
    known = [s for s in scores if s is not None]
    if len(known) == len(scores):
        return scores  # type: ignore[return-value]
    mean = sum(known) / len(known) if known else 0.0
    return [mean if s is None else s for s in scores]


def total_scores(
    weights: list[tuple[str, float]], backends: list[BackendView], detector: SaturationDetector
) -> list[float]:
    """Each candidate's weighted sum of its scores (`weights`: scorer name, weight > 0)."""
    totals = [0.0] * len(backends)
    for name, w in weights:
        for i, s in enumerate(filled(SCORERS[name](backends, detector))):
            totals[i] += w * s
    return totals
