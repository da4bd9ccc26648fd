"""The one routing pipeline, every profile's (policies/profiles.py):

    capability -> track -> health and ejection -> stale load -> saturation     (policies/filters.py)
    -> weighted scores (policies/scorers.py) -> picker (policies/pickers.py) -> saturated last

`route` is its one entry point; `ModelPool` (gateway/backends/pool.py) builds the
views and calls it for generations and one-shot calls alike. The result is every
candidate in the order to try them: the first is the choice, the rest the failover
order. With fewer than two candidates after the health filter there is nothing to
choose: the steps after it (load, saturation, scores, picker) do not run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from adapters.base import GenerationRequest
from policies.filters import (
    CapabilityGap,
    capability_gaps,
    capable,
    forget_stale_load,
    healthy,
    mark_saturation,
    on_track,
    saturated_last,
)
from policies.pickers import PICKERS, Decision, RouteState
from policies.profiles import Profile
from policies.rollout_records import Track
from policies.saturation import DEFAULT_DETECTOR, SaturationDetector
from policies.scorers import total_scores
from policies.views import BackendView


@dataclass(frozen=True, slots=True)
class RouteResult:
    """The candidates in the order to try them, the backends the capability filter
    removed (with why), each candidate's total where the profile has scorers, and whether the request's track had no serving backend and
    the other track's were taken (`fell_back`)."""

    candidates: list[BackendView]
    refused: list[CapabilityGap]
    scores: dict[str, float] = field(default_factory=dict)
    fell_back: bool = False

    @property
    def unsupported(self) -> bool:
        """No backend can serve the request because each lacks something it needs."""
        return not self.candidates and bool(self.refused)


def route(
    profile: Profile,
    views: list[BackendView],
    req: GenerationRequest,
    key: str | None = None,
    detector: SaturationDetector = DEFAULT_DETECTOR,
    state: RouteState | None = None,
    now: float | None = None,
    track: Track | None = None,
) -> RouteResult:
    """The steps of the module docstring, in order. `key`: the tie-break and affinity
    key (default the prompt's start, `prefix_key`); `state`: the pool's (a fresh one
    by default, so a rotating picker starts its ring); `now`: the load readings' clock;
    `track`: the request's in a rollout (None: the model has none, no step runs)."""
    fit = capable(views, req)
    refused = capability_gaps(views, req) if len(fit) < len(views) else []
    fell_back = False
    if track is not None:
        fit, fell_back = on_track(fit, track)
    candidates = healthy(fit)
    if len(candidates) < 2:
        # Nothing to choose between: no load to read, no score, no pick (a rotating
        # picker's turn is for choices; the candidate's saturation orders nothing).
        return RouteResult(candidates, refused, {}, fell_back)
    now = time.time() if now is None else now
    key = prefix_key(req.messages, req.prompt) if key is None else key
    candidates = mark_saturation(forget_stale_load(candidates, detector, now), detector, now)
    weights = profile.active
    totals = total_scores(weights, candidates, detector)
    picked = PICKERS[profile.picker](candidates, totals, Decision(key, profile, state or RouteState()))
    ordered = saturated_last(picked)
    scores = {b.name: total for b, total in zip(candidates, totals)} if weights else {}
    return RouteResult(ordered, refused, scores, fell_back)


def prefix_key(messages: list[dict] | None, prompt: object, chars: int = 512) -> str:
    """The routing key: the start of the rendered conversation, or of the prompt."""
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
