"""A model's rollout: its backends split into a `stable` and a `candidate` track
(`BackendConfig.track`), and `models.<name>.rollout`, the steps of traffic share the
candidate climbs, the mirror, how assignment sticks, the analysis window and the gates.

The request path reads the steps, the mirror and `sticky` (gateway/serving/rollout.py,
policies/rollout_assign.py); the analysis (policies/rollout.py) reads `window_s`,
`min_samples` and `gates`. `rollout_problem` is the check that a model's tracks and its
rollout block agree, called by the config's validation with the model's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from gateway.config.section import StrictSection
from policies.rollout_records import Track

StickyKey = Literal["session", "tenant"]
DEFAULT_STEPS = (0.01, 0.05, 0.25, 0.5, 1.0)
DEFAULT_STICKY: tuple[StickyKey, ...] = ("session",)


class MirrorConfig(StrictSection):
    """Copies of stable requests sent to the candidate, compared and discarded:
    `share` of the stable requests, at most `max_inflight` copies at once (a copy past
    it is dropped and counted, never queued)."""

    share: float = Field(0.0, ge=0, le=1)
    max_inflight: int = Field(8, ge=1)


class RolloutGates(StrictSection):
    """What the candidate must hold against stable over a window to be promoted; a broken
    gate rolls it back. The analysis (policies/rollout.py `Gates`, the same names) gives
    them their meaning: latency as the candidate's requests past the stable p95 times the
    ratio, rates by their Wilson lower bound (docs/rollouts.md, "Gates")."""

    # Latency: the candidate's TTFT and mean inter-token gap against stable's percentile
    # (`*_percentile`, p95 by default; the ratios' names keep "p95") times the ratio.
    ttft_p95_ratio_max: float = Field(1.5, ge=1)
    itl_p95_ratio_max: float = Field(1.5, ge=1)
    ttft_percentile: float = Field(0.95, gt=0, lt=1)
    itl_percentile: float = Field(0.95, gt=0, lt=1)
    # Failures (5xx, overload; timeouts): the candidate's rate at most stable's plus this.
    error_rate_max_delta: float = Field(0.01, ge=0, le=1)
    timeout_rate_max_delta: float = Field(0.01, ge=0, le=1)
    # Finish reasons: total variation distance between the two tracks' distributions.
    finish_reason_distance_max: float = Field(0.2, ge=0, le=1)
    # The candidate's share of tool calls that are not a name with JSON arguments, and of
    # structured answers not valid against the request's schema.
    tool_call_invalid_rate_max: float = Field(0.02, ge=0, le=1)
    structured_invalid_rate_max: float = Field(0.02, ge=0, le=1)
    # Usage: the candidate's prompt tokens for the same (mirrored) prompt within this
    # relative distance of stable's; and the share of mirrored pairs that may differ.
    usage_tolerance: float = Field(0.02, ge=0, le=1)
    mirror_difference_rate_max: float = Field(0.1, ge=0, le=1)


class RolloutConfig(StrictSection):
    """`models.<name>.rollout`."""

    # The candidate's share of assignment keys at each step, increasing, each in (0, 1];
    # a first step of 0 is a mirror-only step (the candidate serves no client yet).
    steps: list[float] = Field(default_factory=lambda: list(DEFAULT_STEPS), min_length=1)
    mirror: MirrorConfig = Field(default_factory=MirrorConfig)
    # What keeps a client on one track: its session keys (policies/session.py's sources)
    # and/or its tenant; a request with neither is drawn on its own.
    sticky: list[StickyKey] = Field(default_factory=lambda: list(DEFAULT_STICKY))
    window_s: float = Field(60.0, gt=0)  # the analysis window
    min_samples: int = Field(20, ge=1)  # per track and gate in a window before any verdict
    gates: RolloutGates = Field(default_factory=RolloutGates)
    # The controller's (docs/rollouts.md): start without an admin call; run the conformance
    # suite against the candidate first; held windows in a row, or held windows whose
    # verdicts flapped, after which a human decides.
    auto_start: bool = True
    preflight: bool = False
    pause_after_holds: int = Field(10, ge=1)
    flap_windows: int = Field(4, ge=2)

    @field_validator("steps")
    @classmethod
    def _increasing(cls, steps: list[float]) -> list[float]:
        if any(not 0 < s <= 1 for s in steps[1:]) or not 0 <= steps[0] <= 1:
            raise ValueError(f"steps {steps}: each is a share of traffic in (0, 1] (a first 0: mirror only)")
        if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
            raise ValueError(f"steps {steps} must increase")
        return steps

    @field_validator("sticky")
    @classmethod
    def _once(cls, sticky: list[StickyKey]) -> list[StickyKey]:
        if len(set(sticky)) != len(sticky):
            raise ValueError(f"sticky {sticky} names a key twice")
        return sticky


def rollout_problem(name: str, rollout: RolloutConfig | None, tracks: Sequence[tuple[str, Track]]) -> str | None:
    """What is wrong between model `name`'s rollout block and its backends' tracks
    (each backend's name and track), None: nothing."""
    candidates = [backend for backend, track in tracks if track == "candidate"]
    if rollout is None:
        if candidates:
            return (
                f"models.{name}: backend(s) {candidates} are on the candidate track, "
                "which needs a rollout block (models.<name>.rollout)"
            )
        return None
    if not candidates:
        return f"models.{name}.rollout: no backend of the model is on the candidate track (track: candidate)"
    if len(candidates) == len(tracks):
        return f"models.{name}.rollout: every backend is a candidate; at least one must be on the stable track"
    return None
