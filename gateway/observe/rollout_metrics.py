"""The `switchyard_rollout_*` metrics (docs/rollouts.md lists them with the alerts that
read them). Gauges follow the shared state, so every replica shows the same step;
`decisions_total` and `actions_total` count on the replica that applied them (sum over
replicas for the deployment's)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.observe.metrics import registered
from policies.rollout import WindowVerdict
from policies.rollout_state import ACTIONS, Plan, RolloutState, shares

PHASES = ("pending", "preflight", "step", "paused", "promoted", "rolled_back")
DECISIONS = ("promote", "rollback", "hold", "pause")
VERDICT_VALUE = {"pass": 1.0, "insufficient": 0.0, "fail": -1.0}


class RolloutMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        counter, gauge, _ = registered(registry)
        self.step = gauge("switchyard_rollout_step", "The rollout's step (0-based; -1 when not at a step).", ["model"])
        self.share = gauge(
            "switchyard_rollout_candidate_share", "Share of assignment keys the candidate serves now.", ["model"]
        )
        self.mirror = gauge(
            "switchyard_rollout_mirror_share", "Share of stable requests mirrored to the candidate now.", ["model"]
        )
        self.state = gauge(
            "switchyard_rollout_state",
            "1 for the rollout's phase (pending, preflight, step, paused, promoted, rolled_back), 0 for the others.",
            ["model", "state"],
        )
        self.decisions = counter(
            "switchyard_rollout_decisions_total",
            "Windows judged, by decision (promote, rollback, hold, pause), on the replica that judged them.",
            ["model", "decision"],
        )
        self.actions = counter(
            "switchyard_rollout_actions_total",
            "Operator actions applied (start, pause, resume, promote, abort).",
            ["model", "action"],
        )
        self.gates = gauge(
            "switchyard_rollout_gate_verdict",
            "The last judged window's verdict per gate: 1 pass, 0 insufficient, -1 fail.",
            ["model", "gate"],
        )
        self.window_requests = gauge(
            "switchyard_rollout_window_requests",
            "Requests of the last judged window, per track (stable, candidate, mirror).",
            ["model", "track"],
        )
        self.store_errors = counter(
            "switchyard_rollout_store_errors_total",
            "Rollout store calls that failed (the last known shares stay in force).",
            ["model"],
        )
        self._known: set[str] = set()

    def show(self, model: str, plan: Plan, state: RolloutState) -> None:
        if model not in self._known:  # the counters exported from 0, so rate() sees the first one
            self._known.add(model)
            for decision in DECISIONS:
                self.decisions.labels(model, decision)
            for action in ACTIONS:
                self.actions.labels(model, action)
            self.store_errors.labels(model)
        now = shares(plan, state)
        at_step = state.phase == "step" or (state.phase == "paused" and state.resume_to == "step")
        self.step.labels(model).set(state.step if at_step else -1)
        self.share.labels(model).set(now.candidate)
        self.mirror.labels(model).set(now.mirror)
        for phase in PHASES:
            self.state.labels(model, phase).set(1.0 if state.phase == phase else 0.0)

    def judged(self, model: str, verdict: WindowVerdict, decision: str) -> None:
        self.decisions.labels(model, decision).inc()
        for gate in verdict.gates:
            self.gates.labels(model, gate.gate).set(VERDICT_VALUE[gate.verdict])
        for track, n in (
            ("stable", verdict.stable_n),
            ("candidate", verdict.candidate_n),
            ("mirror", verdict.mirror_n),
        ):
            self.window_requests.labels(model, track).set(n)
