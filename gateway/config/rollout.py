"""A model's rollout: its backends split into a `stable` and a `candidate` track
(`BackendConfig.track`), and `models.<name>.rollout`: the policy's plan settings
(policies/rollout_state.py `PlanSettings`: steps, mirror, window, gates, the controller's
options) and how assignment sticks. `rollout_problem` checks that a model's tracks and its
rollout block agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from policies.rollout_records import Track
from policies.rollout_state import PlanSettings

StickyKey = Literal["session", "tenant"]
DEFAULT_STICKY: tuple[StickyKey, ...] = ("session",)


class RolloutConfig(PlanSettings):
    """`models.<name>.rollout`: the policy's own `PlanSettings` (the steps rule, the other
    fields' defaults and bounds are its) and what keeps a client on one track."""

    # Its session keys (policies/session.py's sources) and/or its tenant; a request with
    # neither is drawn on its own.
    sticky: list[StickyKey] = Field(default_factory=lambda: list(DEFAULT_STICKY))

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
