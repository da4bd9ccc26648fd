"""Which track of a rollout serves a request, and whether a stable one is mirrored.

The assignment key (the session's digest, else the tenant when the rollout sticks by
tenant, else the request) is hashed with the model's name to a point in [0, 1)
(`key_point`); the candidate serves the keys below its share, so raising the share only
moves keys from stable to candidate. Nothing is kept of a key (docs/architecture.md,
"Rollouts on the request path": "Assignment").
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from adapters.base import GenerationRequest
from policies.rollout_records import Track, TrackShares
from policies.session import session_key

_SCALE = float(1 << 64)


def key_point(model: str, key: str) -> float:
    """`key`'s place in [0, 1) for `model`: the first 8 bytes of SHA-256 over both."""
    digest = hashlib.sha256(f"{model}\x00{key}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def track_of(point: float, candidate_share: float) -> Track:
    """The track serving a key at `point` when the candidate has `candidate_share`."""
    return "candidate" if point < candidate_share else "stable"


def assignment_key(req: GenerationRequest, sticky: Sequence[str], session_sources: Sequence[str]) -> str:
    """The key a request is assigned by: its session (the model's session sources) when
    `sticky` names session and it has one, else its tenant when `sticky` names tenant,
    else the request's own id (the gateway's, random: a fresh draw per request)."""
    if "session" in sticky:
        session = session_key(req, session_sources)
        if session is not None:
            return "s:" + session
    if "tenant" in sticky and req.tenant:
        return "t:" + req.tenant
    return "r:" + req.request_id


def assign(
    model: str, req: GenerationRequest, shares: TrackShares, sticky: Sequence[str], session_sources: Sequence[str]
) -> Track:
    """The track that serves `req` under `shares`."""
    if shares.candidate <= 0.0:
        return "stable"
    if shares.candidate >= 1.0:
        return "candidate"
    return track_of(key_point(model, assignment_key(req, sticky, session_sources)), shares.candidate)


def mirrored(model: str, req: GenerationRequest, shares: TrackShares) -> bool:
    """Whether a stable request is copied to the candidate: a draw of its own id (a
    per-request choice, not sticky: the mirror samples requests, not clients), on a
    second hash so that it is independent of the request's own assignment draw."""
    if shares.mirror <= 0.0:
        return False
    return shares.mirror >= 1.0 or key_point(model, "m:" + req.request_id) < shares.mirror
