"""A model's rollout: its backends split into a `stable` and a `candidate` track
(`BackendConfig.track`), and `models.<name>.rollout`: the steps of traffic share the
candidate climbs, the mirror, how assignment sticks, the analysis window and the gates
(the policy's own `GateLimits`). `rollout_problem` checks that a model's tracks and its
rollout block agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from gateway.config.section import StrictSection
from policies.rollout import GateLimits
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
    gates: GateLimits = Field(default_factory=GateLimits)  # the policy's own type
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
