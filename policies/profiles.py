"""Routing profiles: which scorers weigh in, and which picker orders the candidates
(the filters are every profile's, policies/filters.py). The plain policies are
profiles with no scorers and a picker of their name; `blended`, `precise` and an
explicit `{scorers: ...}` weigh scorers and pick by the total with a bounded load.
`models.<name>.routing` is a name of `PROFILES` or a `Profile`."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from policies.scorers import SCORERS
from policies.settings import Settings

PickerName = Literal["round_robin", "weighted", "least_loaded", "prefix_affinity", "max_score"]
ProfileName = Literal["round_robin", "weighted", "least_loaded", "prefix_affinity", "blended", "precise"]
# The pickers that order by the scorers' totals; the others order by themselves.
SCORED_PICKERS: tuple[PickerName, ...] = ("max_score",)
DEFAULT_LOAD_FACTOR = 1.25


class Profile(Settings):
    """Scorer name -> weight (0 leaves one out), the picker, and the `max_score`
    picker's bounded load: no backend past `load_factor` times its weighted share of
    the pool's in-flight requests, unless it has fewer than `load_floor`."""

    scorers: dict[str, float] = Field(default_factory=dict)
    picker: PickerName = "max_score"
    load_factor: float = Field(DEFAULT_LOAD_FACTOR, ge=1)  # 1: never above the mean
    load_floor: int = Field(1, ge=1)  # 1: no floor

    @field_validator("scorers")
    @classmethod
    def _known(cls, weights: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(weights) - set(SCORERS))
        if unknown:
            raise ValueError(f"unknown scorers {unknown}; known: {sorted(SCORERS)}")
        if any(w < 0 or not math.isfinite(w) for w in weights.values()):
            raise ValueError("scorer weights must be finite and not negative")
        return weights

    @model_validator(mode="after")
    def _one_picker(self) -> Profile:
        if self.picker in SCORED_PICKERS:
            if not self.active:
                raise ValueError(f"at least one must be positive: the {self.picker} picker orders by the scorers")
        elif self.scorers or {"load_factor", "load_floor"} & self.model_fields_set:
            raise ValueError(f"the {self.picker} picker reads no scores and no load bound: leave them out")
        return self

    @property
    def active(self) -> list[tuple[str, float]]:
        return [(name, w) for name, w in self.scorers.items() if w > 0]

    def uses(self, *scorers: str) -> bool:
        """Whether any of `scorers` has a weight, so the pool knows which views to fill."""
        return any(self.scorers.get(name, 0) > 0 for name in scorers)


# Why these weights (docs/architecture.md, "Routing"): `blended` keeps the Inference
# Extension's prefix 3, queue 2, kv 2, adds the gateway's own in-flight count and a
# session weight above all the others together; `precise` trusts a KV-event match more.
PROFILES: dict[ProfileName, Profile] = {
    "round_robin": Profile(picker="round_robin"),
    "weighted": Profile(picker="weighted"),
    "least_loaded": Profile(picker="least_loaded"),
    "prefix_affinity": Profile(picker="prefix_affinity"),
    "blended": Profile(scorers={"prefix": 3.0, "queue": 2.0, "kv": 2.0, "inflight": 2.0, "session": 10.0}),
    "precise": Profile(
        scorers={"prefix": 6.0, "queue": 2.0, "kv": 2.0, "inflight": 2.0, "backlog": 6.0, "session": 19.0},
        load_factor=2.0,
        load_floor=4,
    ),
}

# `models.<name>.routing`: a name, or a profile (a config error then names only what is wrong with it).
Routing = Annotated[
    Annotated[ProfileName, Tag("name")] | Annotated[Profile, Tag("profile")],
    Discriminator(lambda v: "name" if isinstance(v, str) else "profile"),
]


def profile_of(routing: ProfileName | Profile) -> Profile:
    """The profile a model's `routing` names or is."""
    return PROFILES[routing] if isinstance(routing, str) else routing
