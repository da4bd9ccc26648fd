"""A rollout's state machine: pure functions of (plan, state, event) -> state and the
events to emit. Every replica runs the same transition on the same stored state and
the store applies it by compare-and-set on `version` (stores/rollout_redis.py), so two
replicas never take different steps. The phases, transitions and shares of each:
docs/rollouts.md, "The state machine".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field, field_validator

from policies.rollout import Decision, GateLimits, WindowVerdict
from policies.rollout_records import NO_ROLLOUT, TrackShares
from policies.settings import Settings

Phase = Literal["pending", "preflight", "step", "paused", "promoted", "rolled_back"]
FINAL: frozenset[str] = frozenset({"promoted", "rolled_back"})
ACTIONS = ("start", "pause", "resume", "promote", "abort")
HISTORY_MAX = 20  # window decisions kept in the state (what the flap rule and the admin API read)


DEFAULT_STEPS = (0.01, 0.05, 0.25, 0.5, 1.0)


class MirrorSettings(Settings):
    """Copies of stable requests sent to the candidate, compared and discarded: `share` of
    the stable requests while a step runs, at most `max_inflight` copies at once in one
    process (gateway/serving/mirror.py: a copy past it is dropped and counted, never queued)."""

    share: float = Field(0.0, ge=0, le=1)
    max_inflight: int = Field(8, ge=1)


class PlanSettings(Settings):
    """A rollout's settings, the one owner of their defaults and bounds: the config's
    `models.<name>.rollout` is this type (gateway/config/rollout.py adds `sticky`).
    `steps`: the candidate's share at each step; `auto_start`: start without an admin
    call; `preflight`: run the conformance suite against the candidate first;
    `pause_after_holds`: held windows in a row (too few samples) after which a human
    decides; `flap_windows`: held windows in a row whose verdicts flipped every window
    (`flapped`) after which a human decides."""

    steps: tuple[float, ...] = Field(DEFAULT_STEPS, min_length=1)
    mirror: MirrorSettings = Field(default_factory=MirrorSettings)
    gates: GateLimits = Field(default_factory=GateLimits)
    window_s: float = Field(60.0, gt=0)  # the analysis window
    min_samples: int = Field(20, ge=1)  # per track and gate in a window before a verdict
    auto_start: bool = True
    preflight: bool = False
    pause_after_holds: int = Field(10, ge=1)
    flap_windows: int = Field(4, ge=2)

    @field_validator("steps")
    @classmethod
    def _increasing(cls, steps: tuple[float, ...]) -> tuple[float, ...]:
        """The steps rule: each a share in (0, 1], a first 0 allowed (a mirror-only step:
        the candidate serves no client yet), strictly increasing."""
        shown = list(steps)
        if any(not 0 < s <= 1 for s in steps[1:]) or not 0 <= steps[0] <= 1:
            raise ValueError(f"steps {shown}: each is a share of traffic in (0, 1] (a first 0: mirror only)")
        if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
            raise ValueError(f"steps {shown} must increase")
        return steps


class Plan(PlanSettings):
    """A rollout as configured, named by `rollout_id` (gateway/lifecycle/rollout.py
    `plans_of`: a digest of the config block)."""

    rollout_id: str


@dataclass(frozen=True)
class RolloutState:
    """What every replica shares about one model's rollout. `version` is the fencing
    counter: each applied transition adds one. `window` is the last window judged (its
    index: start time // window_s), so each window is judged once. `resume_to` is the phase
    a pause left. `history` the last decisions, newest last."""

    rollout_id: str
    phase: Phase = "pending"
    step: int = 0
    version: int = 0
    window: int = -1
    holds: int = 0
    resume_to: Phase | None = None
    reason: str = ""
    updated_at: float = 0.0
    history: tuple[str, ...] = ()

    @property
    def final(self) -> bool:
        return self.phase in FINAL

    def to_dict(self) -> dict[str, object]:
        data = dict(self.__dict__)
        data["history"] = list(self.history)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RolloutState:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["history"] = tuple(known.get("history") or ())  # type: ignore[arg-type]
        return cls(**known)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Emitted:
    """An event a transition emits (a log line and the rollout metrics): `kind` is
    started, promoted (to `step`), completed, rolled_back, paused, resumed, held."""

    kind: str
    step: int
    share: float
    reason: str


class TransitionRefused(Exception):
    """The event does not apply to the state (a 409 at the admin API)."""


def shares(plan: Plan, state: RolloutState | None) -> TrackShares:
    """What the request path serves for this state."""
    if state is None or state.rollout_id != plan.rollout_id:
        return NO_ROLLOUT
    if state.phase == "promoted":
        return TrackShares(candidate=1.0, mirror=0.0)
    live = state.phase == "step" or (state.phase == "paused" and state.resume_to == "step")
    if not live:
        return NO_ROLLOUT
    return TrackShares(candidate=plan.steps[state.step], mirror=plan.mirror.share)


def share(plan: Plan, state: RolloutState) -> float:
    return shares(plan, state).candidate


def act(
    plan: Plan, state: RolloutState, action: str, now: float, reason: str = ""
) -> tuple[RolloutState, list[Emitted]]:
    """A manual action (start, pause, resume, promote, abort)."""
    if action not in ACTIONS:
        raise TransitionRefused(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
    if state.final:
        raise TransitionRefused(f"the rollout is {state.phase}: nothing to {action}")
    why = reason or f"{action} by an operator"
    if action == "start":
        if state.phase != "pending":
            raise TransitionRefused(f"the rollout has started already ({state.phase})")
        if plan.preflight:
            return _to(state, now, phase="preflight", reason=why), [_emit("preflight", plan, state, why)]
        return _started(plan, state, now, why)
    if action == "pause":
        if state.phase in ("paused", "pending"):
            raise TransitionRefused(f"the rollout is {state.phase}: nothing to pause")
        new = _to(state, now, phase="paused", resume_to=state.phase, reason=why)
        return new, [_emit("paused", plan, new, why)]
    if action == "resume":
        if state.phase != "paused":
            raise TransitionRefused(f"the rollout is {state.phase}, not paused")
        window = max(state.window, _in_progress(plan, now))
        new = _to(state, now, phase=state.resume_to or "step", resume_to=None, holds=0, reason=why, window=window)
        return new, [_emit("resumed", plan, new, why)]
    if action == "promote":
        if state.phase == "pending":
            raise TransitionRefused("the rollout has not started: start it first")
        return _promoted(plan, state, now, why)
    return _rolled_back(plan, state, now, why)


def preflight_done(
    plan: Plan, state: RolloutState, failed_checks: tuple[str, ...], now: float
) -> tuple[RolloutState, list[Emitted]]:
    """The conformance suite's answer: a MUST failure refuses the rollout, naming the checks."""
    if state.phase != "preflight":
        raise TransitionRefused(f"the rollout is {state.phase}, not in preflight")
    if failed_checks:
        named = ", ".join(failed_checks[:10]) + (
            f" and {len(failed_checks) - 10} more" if len(failed_checks) > 10 else ""
        )
        return _rolled_back(plan, state, now, "preflight refused: MUST checks failed: " + named)
    return _started(plan, state, now, "preflight passed")


def window_closed(
    plan: Plan, state: RolloutState, window: int, verdict: WindowVerdict, now: float
) -> tuple[RolloutState, list[Emitted]]:
    """Apply one window's verdict to a running step; a window judged already, or one
    closing while the rollout does not run a step, changes nothing."""
    if state.phase != "step" or window <= state.window:
        return state, []
    decision: Decision = verdict.decision
    insufficient = ",".join(g.gate for g in verdict.gates if g.verdict == "insufficient")
    entry = f"hold:{insufficient}" if decision == "hold" else decision
    history = (*state.history, entry)[-HISTORY_MAX:]
    judged = replace(state, window=window, history=history)
    if decision == "rollback":
        return _rolled_back(plan, judged, now, "gates failed: " + ", ".join(verdict.failed))
    if decision == "promote":
        return _promoted(plan, judged, now, "every gate passed")
    holds = state.holds + 1
    why = ""
    if flapped(history[-holds:], plan.flap_windows):
        why = (
            f"the verdict flapped over {plan.flap_windows} windows (insufficient now: {insufficient}): a human decides"
        )
    elif holds >= plan.pause_after_holds:
        why = f"held {holds} windows in a row (insufficient: {insufficient}): a human decides"
    if why:
        new = _to(judged, now, phase="paused", resume_to="step", holds=holds, reason=why)
        return new, [_emit("paused", plan, new, why)]
    new = _to(judged, now, holds=holds, reason=f"hold: insufficient {insufficient}")
    return new, [_emit("held", plan, new, new.reason)]


def flapped(history: tuple[str, ...], windows: int) -> bool:
    """Whether the last `windows` held windows of a step each held for different gates
    than the one before: gates pass one window and lack evidence the next, every window,
    so no gate settles (a steady shortfall is the other pause, `pause_after_holds`)."""
    tail = history[-windows:]
    return len(tail) >= windows >= 2 and all(a != b for a, b in zip(tail, tail[1:], strict=False))


def _to(state: RolloutState, now: float, **changes: object) -> RolloutState:
    return replace(state, version=state.version + 1, updated_at=now, **changes)  # type: ignore[arg-type]


def _emit(kind: str, plan: Plan, state: RolloutState, reason: str) -> Emitted:
    """The event, with the candidate's share as served in `state` (a pause in preflight serves none)."""
    return Emitted(kind, state.step, share(plan, state), reason)


def _in_progress(plan: Plan, now: float) -> int:
    """The window in progress at `now`: a step's first judged window is the next one,
    all of it served at the step's share."""
    return int(now // plan.window_s)


def _started(plan: Plan, state: RolloutState, now: float, why: str) -> tuple[RolloutState, list[Emitted]]:
    if plan.steps[0] >= 1.0:  # one step of everything: no canary, promoted at once
        new = _to(state, now, phase="promoted", resume_to=None, holds=0, reason=why)
        return new, [_emit("completed", plan, new, why)]
    window = max(state.window, _in_progress(plan, now))
    new = _to(state, now, phase="step", step=0, holds=0, resume_to=None, reason=why, window=window)
    return new, [_emit("started", plan, new, why)]


def _promoted(plan: Plan, state: RolloutState, now: float, why: str) -> tuple[RolloutState, list[Emitted]]:
    start = state.phase in ("pending", "preflight") or (state.phase == "paused" and state.resume_to == "preflight")
    if start:
        return _started(plan, state, now, why)
    if state.step + 1 >= len(plan.steps) or plan.steps[state.step + 1] >= 1.0:
        # the candidate serving everything is the promotion: no stable is left to judge it by
        new = _to(state, now, phase="promoted", resume_to=None, holds=0, reason=why)
        return new, [_emit("completed", plan, new, why)]
    window = max(state.window, _in_progress(plan, now))
    new = _to(state, now, phase="step", step=state.step + 1, resume_to=None, holds=0, reason=why, window=window)
    return new, [_emit("promoted", plan, new, why)]


def _rolled_back(plan: Plan, state: RolloutState, now: float, why: str) -> tuple[RolloutState, list[Emitted]]:
    new = _to(state, now, phase="rolled_back", resume_to=None, reason=why)
    return new, [Emitted("rolled_back", state.step, 0.0, why)]
