"""gateway/observe/rollout_metrics.py as a scrape reads it: each family's name, help, type and
labels; the counters exported at 0 from a model's first showing; the step gauge at a step, at
a pause that left a step and at every other phase; the judged window's gates and tracks."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.observe.rollout_metrics import PHASES, RolloutMetrics
from policies.rollout import GateVerdict, WindowVerdict
from policies.rollout_state import ACTIONS, Plan, RolloutState

HELP = {
    "switchyard_rollout_step": ("gauge", "The rollout's step (0-based; -1 when not at a step)."),
    "switchyard_rollout_candidate_share": ("gauge", "Share of assignment keys the candidate serves now."),
    "switchyard_rollout_mirror_share": ("gauge", "Share of stable requests mirrored to the candidate now."),
    "switchyard_rollout_state": (
        "gauge",
        "1 for the rollout's phase (pending, preflight, step, paused, promoted, rolled_back), 0 for the others.",
    ),
    "switchyard_rollout_decisions": (
        "counter",
        "Windows judged, by decision (promote, rollback, hold, pause), on the replica that judged them.",
    ),
    "switchyard_rollout_actions": ("counter", "Operator actions applied (start, pause, resume, promote, abort)."),
    "switchyard_rollout_gate_verdict": (
        "gauge",
        "The last judged window's verdict per gate: 1 pass, 0 insufficient, -1 fail.",
    ),
    "switchyard_rollout_window_requests": (
        "gauge",
        "Requests of the last judged window, per track (stable, candidate, mirror).",
    ),
    "switchyard_rollout_store_errors": (
        "counter",
        "Rollout store calls that failed (the last known shares stay in force).",
    ),
}
PLAN = Plan(rollout_id="r1", steps=(0.1, 0.5, 1.0), mirror={"share": 0.2})


def scrape(registry: CollectorRegistry) -> tuple[dict, dict[tuple, float]]:
    """({family: (type, help)}, {(sample name, sorted labels): value})."""
    families, samples = {}, {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        if family.name.endswith("_created"):  # the client's own series beside each counter
            continue
        families[family.name] = (family.type, family.documentation)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return families, samples


def test_each_family_is_named_described_and_typed_and_its_counters_start_at_zero():
    registry = CollectorRegistry()
    RolloutMetrics(registry).show("m", PLAN, RolloutState("r1", phase="step", step=1))
    families, samples = scrape(registry)
    assert families == HELP
    for decision in ("promote", "rollback", "hold", "pause"):
        assert samples[("switchyard_rollout_decisions_total", (("decision", decision), ("model", "m")))] == 0
    for action in ACTIONS:
        assert samples[("switchyard_rollout_actions_total", (("action", action), ("model", "m")))] == 0
    assert samples[("switchyard_rollout_store_errors_total", (("model", "m"),))] == 0
    assert samples[("switchyard_rollout_step", (("model", "m"),))] == 1
    assert samples[("switchyard_rollout_candidate_share", (("model", "m"),))] == 0.5
    assert samples[("switchyard_rollout_mirror_share", (("model", "m"),))] == 0.2
    for phase in PHASES:
        assert samples[("switchyard_rollout_state", (("model", "m"), ("state", phase)))] == (phase == "step")
    # Nothing but model "m"'s series: no series under another model or label value.
    assert all(dict(labels).get("model") == "m" for _, labels in samples)
    assert len(samples) == 4 + len(ACTIONS) + 1 + 3 + len(PHASES)


def step_shown(state: RolloutState) -> float:
    registry = CollectorRegistry()
    RolloutMetrics(registry).show("m", PLAN, state)
    return scrape(registry)[1][("switchyard_rollout_step", (("model", "m"),))]


def test_the_step_gauge_shows_the_step_at_a_step_or_a_pause_that_left_one_and_minus_one_else():
    assert step_shown(RolloutState("r1", phase="step", step=2)) == 2
    assert step_shown(RolloutState("r1", phase="step", step=0)) == 0
    assert step_shown(RolloutState("r1", phase="paused", step=2, resume_to="step")) == 2
    assert step_shown(RolloutState("r1", phase="paused", step=2, resume_to="preflight")) == -1
    assert step_shown(RolloutState("r1", phase="pending", step=2, resume_to="step")) == -1
    assert step_shown(RolloutState("r1", phase="promoted", step=2)) == -1


def test_a_second_showing_moves_the_gauges_and_keeps_the_counts():
    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    metrics.show("m", PLAN, RolloutState("r1", phase="step", step=0))
    metrics.judged("m", WindowVerdict((), 1, 1, 0), "hold")
    metrics.show("m", PLAN, RolloutState("r1", phase="paused", step=0, resume_to="step"))
    _, samples = scrape(registry)
    assert samples[("switchyard_rollout_decisions_total", (("decision", "hold"), ("model", "m")))] == 1
    for phase in PHASES:
        assert samples[("switchyard_rollout_state", (("model", "m"), ("state", phase)))] == (phase == "paused")
    assert samples[("switchyard_rollout_candidate_share", (("model", "m"),))] == 0.1


def test_a_judged_window_sets_each_gate_and_each_track():
    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    gates = (GateVerdict("errors", "pass", 30), GateVerdict("ttft", "fail", 30), GateVerdict("diff", "insufficient", 2))
    metrics.judged("m", WindowVerdict(gates, stable_n=70, candidate_n=30, mirror_n=5), "rollback")
    _, samples = scrape(registry)
    verdicts = {dict(k[1])["gate"]: v for k, v in samples.items() if k[0] == "switchyard_rollout_gate_verdict"}
    assert verdicts == {"errors": 1.0, "ttft": -1.0, "diff": 0.0}
    tracks = {
        tuple(sorted(dict(k[1]).items())): v for k, v in samples.items() if k[0] == "switchyard_rollout_window_requests"
    }
    assert tracks == {
        (("model", "m"), ("track", "stable")): 70,
        (("model", "m"), ("track", "candidate")): 30,
        (("model", "m"), ("track", "mirror")): 5,
    }
    assert samples[("switchyard_rollout_decisions_total", (("decision", "rollback"), ("model", "m")))] == 1
