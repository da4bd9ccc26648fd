"""What a mutation run of policies/rollout_state.py left open: each transition's whole
new state (its reason, its time, its holds) and the events it emits (kind, step, share,
reason), each refusal's message, the preflight's list of failed checks at its bound of
ten, the state's dict, and the shares of a rollout paused in preflight."""

from __future__ import annotations

import pytest

from policies.rollout_records import NO_ROLLOUT, TrackShares
from policies.rollout_state import (
    Emitted,
    Plan,
    RolloutState,
    TransitionRefused,
    act,
    flapped,
    preflight_done,
    shares,
    window_closed,
)
from tests.policies.test_rollout_state import PLAN, verdict

PREFLIGHT = Plan(rollout_id="r1", steps=(0.1, 0.5, 1.0), preflight=True)


def running(step: int = 0, **kw: object) -> RolloutState:
    """A state running `step`, at version 4 (what a transition counts from), window 7."""
    fields: dict[str, object] = {"phase": "step", "version": 4, "window": 7, "updated_at": 5.0} | kw
    return RolloutState("r1", step=step, **fields)  # type: ignore[arg-type]


def test_the_state_dict_names_every_field_and_reads_back():
    state = RolloutState(
        "r1",
        phase="paused",
        step=1,
        version=3,
        window=2,
        holds=1,
        resume_to="step",
        reason="why",
        updated_at=9.0,
        history=("promote", "hold:a"),
    )
    assert state.to_dict() == {
        "rollout_id": "r1",
        "phase": "paused",
        "step": 1,
        "version": 3,
        "window": 2,
        "holds": 1,
        "resume_to": "step",
        "reason": "why",
        "updated_at": 9.0,
        "history": ["promote", "hold:a"],
    }
    assert RolloutState.from_dict(state.to_dict() | {"unknown": 1}) == state
    assert RolloutState.from_dict({"rollout_id": "r1", "history": None}).history == ()


def test_a_rollout_paused_in_preflight_serves_nothing_and_a_promoted_one_mirrors_nothing():
    paused = RolloutState("r1", phase="paused", resume_to="preflight")
    assert shares(PLAN, paused) == NO_ROLLOUT
    assert shares(PLAN, RolloutState("r1", phase="promoted")) == TrackShares(candidate=1.0, mirror=0.0)
    assert shares(PLAN, RolloutState("r1", phase="rolled_back", resume_to="step")) == NO_ROLLOUT


def test_an_operators_start_without_a_reason_says_who_and_when():
    state, events = act(PLAN, RolloutState("r1", window=-1), "start", 125.0)
    assert state == RolloutState(
        "r1", phase="step", version=1, window=2, reason="start by an operator", updated_at=125.0
    )
    assert events == [Emitted("started", 0, 0.1, "start by an operator")]
    state, _ = act(PLAN, RolloutState("r1"), "start", 1.0, reason="ticket 42")
    assert state.reason == "ticket 42"


def test_a_start_into_preflight_records_why_and_emits_preflight_at_no_share():
    state, events = act(PREFLIGHT, RolloutState("r1"), "start", 3.0, reason="go")
    assert state == RolloutState("r1", phase="preflight", version=1, reason="go", updated_at=3.0)
    assert events == [Emitted("preflight", 0, 0.0, "go")]


def test_a_pause_keeps_the_phase_to_resume_and_the_share_it_serves():
    state, events = act(PLAN, running(step=1), "pause", 20.0)
    assert state == running(
        step=1, version=5, phase="paused", resume_to="step", reason="pause by an operator", updated_at=20.0
    )
    assert events == [Emitted("paused", 1, 0.5, "pause by an operator")]
    pre, _ = act(PREFLIGHT, RolloutState("r1", phase="preflight"), "pause", 2.0)
    assert pre.phase == "paused" and pre.resume_to == "preflight"


@pytest.mark.parametrize("phase", ["paused", "pending"])
def test_a_pause_of_a_rollout_not_running_is_refused_saying_so(phase):
    with pytest.raises(TransitionRefused) as info:
        act(PLAN, RolloutState("r1", phase=phase), "pause", 1.0)
    assert str(info.value) == f"the rollout is {phase}: nothing to pause"


def test_each_refusal_says_what_is_wrong_in_full():
    def refusal(plan: Plan, state: RolloutState, action: str) -> str:
        with pytest.raises(TransitionRefused) as info:
            act(plan, state, action, 1.0)
        return str(info.value)

    assert (
        refusal(PLAN, running(), "explode") == "unknown action 'explode': one of start, pause, resume, promote, abort"
    )
    assert refusal(PLAN, RolloutState("r1", phase="promoted"), "abort") == "the rollout is promoted: nothing to abort"
    assert refusal(PLAN, running(), "start") == "the rollout has started already (step)"
    assert refusal(PLAN, running(), "resume") == "the rollout is step, not paused"
    assert refusal(PLAN, RolloutState("r1"), "promote") == "the rollout has not started: start it first"
    with pytest.raises(TransitionRefused) as info:
        preflight_done(PLAN, running(), (), 1.0)
    assert str(info.value) == "the rollout is step, not in preflight"


def test_a_resume_goes_back_to_the_phase_paused_and_clears_the_holds():
    paused = running(phase="paused", resume_to="step", holds=2, window=1)
    state, events = act(PLAN, paused, "resume", 200.0, reason="back")
    assert state == running(version=5, window=3, reason="back", updated_at=200.0)
    assert events == [Emitted("resumed", 0, 0.1, "back")]
    later, _ = act(PLAN, running(phase="paused", resume_to="step", window=9), "resume", 200.0)
    assert later.window == 9  # never back to a window judged already
    bare, _ = act(PLAN, RolloutState("r1", phase="paused"), "resume", 1.0)
    assert bare.phase == "step"


def test_a_manual_promote_and_abort_carry_the_operators_reason():
    state, events = act(PLAN, running(), "promote", 130.0)
    assert state == running(step=1, version=5, window=7, reason="promote by an operator", updated_at=130.0)
    assert events == [Emitted("promoted", 1, 0.5, "promote by an operator")]
    state, events = act(PLAN, running(step=1, resume_to="step"), "abort", 140.0, reason="bad")
    assert state == running(step=1, version=5, phase="rolled_back", reason="bad", updated_at=140.0)
    assert events == [Emitted("rolled_back", 1, 0.0, "bad")]


def test_a_promote_in_preflight_or_paused_in_it_starts_the_first_step():
    for state in (RolloutState("r1", phase="preflight"), RolloutState("r1", phase="paused", resume_to="preflight")):
        new, events = act(PREFLIGHT, state, "promote", 1.0)
        assert new.phase == "step" and new.step == 0 and events[0].kind == "started"


def test_the_last_step_promoted_completes_at_the_whole_share():
    state, events = act(Plan(rollout_id="r1", steps=(0.1, 0.5)), running(step=1, holds=2), "promote", 9.0)
    assert state == running(
        step=1, version=5, phase="promoted", holds=0, reason="promote by an operator", updated_at=9.0
    )
    assert events == [Emitted("completed", 1, 1.0, "promote by an operator")]


@pytest.mark.parametrize(("count", "tail"), [(9, ""), (10, ""), (11, " and 1 more")])
def test_a_refused_preflight_names_at_most_ten_checks(count, tail):
    checks = tuple(f"c{i}" for i in range(count))
    state, events = preflight_done(PREFLIGHT, RolloutState("r1", phase="preflight"), checks, 4.0)
    named = ", ".join(checks[:10])
    why = f"preflight refused: MUST checks failed: {named}{tail}"
    assert state == RolloutState("r1", phase="rolled_back", version=1, reason=why, updated_at=4.0)
    assert events == [Emitted("rolled_back", 0, 0.0, why)]


def test_a_passed_preflight_starts_the_first_step_saying_so():
    state, events = preflight_done(PREFLIGHT, RolloutState("r1", phase="preflight"), (), 70.0)
    assert state == RolloutState("r1", phase="step", version=1, window=1, reason="preflight passed", updated_at=70.0)
    assert events == [Emitted("started", 0, 0.1, "preflight passed")]


def test_a_failed_window_rolls_back_naming_every_failed_gate():
    failed = verdict(("error_rate", "fail"), ("ttft_p95_ratio", "insufficient"), ("itl_p95_ratio", "fail"))
    state, events = window_closed(PLAN, running(), 8, failed, 50.0)
    why = "gates failed: error_rate, itl_p95_ratio"
    assert state == running(
        version=5, window=8, phase="rolled_back", reason=why, updated_at=50.0, history=("rollback",)
    )
    assert events == [Emitted("rolled_back", 0, 0.0, why)]


def test_a_passed_window_promotes_saying_so():
    state, events = window_closed(PLAN, running(holds=2), 8, verdict(("error_rate", "pass")), 50.0)
    assert state == running(
        step=1, version=5, window=8, reason="every gate passed", updated_at=50.0, history=("promote",)
    )
    assert events == [Emitted("promoted", 1, 0.5, "every gate passed")]


def test_a_held_window_names_only_the_gates_short_of_samples():
    held = verdict(("error_rate", "insufficient"), ("ttft_p95_ratio", "pass"), ("itl_p95_ratio", "insufficient"))
    state, events = window_closed(PLAN, running(holds=1), 8, held, 50.0)
    why = "hold: insufficient error_rate,itl_p95_ratio"
    assert state == running(
        version=5, window=8, holds=2, reason=why, updated_at=50.0, history=("hold:error_rate,itl_p95_ratio",)
    )
    assert events == [Emitted("held", 0, 0.1, why)]


def test_the_hold_that_reaches_the_limit_pauses_with_its_count():
    held = verdict(("error_rate", "insufficient"))
    state, events = window_closed(PLAN, running(holds=2, history=("hold:x",)), 8, held, 50.0)
    why = "held 3 windows in a row (insufficient: error_rate): a human decides"
    assert state == running(
        version=5,
        window=8,
        holds=3,
        phase="paused",
        resume_to="step",
        reason=why,
        updated_at=50.0,
        history=("hold:x", "hold:error_rate"),
    )
    assert events == [Emitted("paused", 0, 0.1, why)]


def test_a_flapping_verdict_pauses_saying_how_long_it_flapped():
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), pause_after_holds=10, flap_windows=2)
    state, events = window_closed(plan, running(holds=1, history=("hold:a",)), 8, verdict(("b", "insufficient")), 9.0)
    why = "the verdict flapped over 2 windows (insufficient now: b): a human decides"
    assert (state.phase, state.holds, state.reason, state.updated_at) == ("paused", 2, why, 9.0)
    assert events == [Emitted("paused", 0, 0.1, why)]


def test_two_windows_are_the_shortest_flap():
    assert flapped(("hold:a", "hold:b"), 2)
    assert not flapped(("hold:a", "hold:a"), 2)


def test_the_window_in_progress_is_the_controllers_floor_division():
    """gateway/lifecycle/rollout.py buckets a record at `at // window_s`; a step's start
    names the same window, also where true division rounds across a whole (1.0 / 0.1)."""
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), window_s=0.1)
    state, _ = act(plan, RolloutState("r1"), "start", 1.0)
    assert state.window == int(1.0 // 0.1)


def test_a_promote_of_a_rollout_paused_at_a_step_takes_the_next_step_afresh():
    paused = running(phase="paused", resume_to="step", holds=2, window=1)
    state, events = act(PLAN, paused, "promote", 200.0)
    assert state == running(step=1, version=5, window=3, reason="promote by an operator", updated_at=200.0)
    assert events == [Emitted("promoted", 1, 0.5, "promote by an operator")]
    last = running(step=1, phase="paused", resume_to="step", holds=2)
    state, events = act(PLAN, last, "promote", 9.0)
    assert state == running(step=1, version=5, phase="promoted", reason="promote by an operator", updated_at=9.0)
    assert events == [Emitted("completed", 1, 1.0, "promote by an operator")]


def test_a_promote_of_a_rollout_paused_in_preflight_starts_it_afresh():
    paused = RolloutState("r1", phase="paused", resume_to="preflight", holds=2, version=2)
    state, events = act(PREFLIGHT, paused, "promote", 70.0)
    assert state == RolloutState(
        "r1", phase="step", version=3, window=1, reason="promote by an operator", updated_at=70.0
    )
    assert events == [Emitted("started", 0, 0.1, "promote by an operator")]
    whole = Plan(rollout_id="r1", steps=(1.0,), preflight=True)
    state, events = act(whole, paused, "promote", 70.0)
    assert state == RolloutState("r1", phase="promoted", version=3, reason="promote by an operator", updated_at=70.0)
    assert events == [Emitted("completed", 0, 1.0, "promote by an operator")]


def test_an_abort_of_a_paused_rollout_leaves_nothing_to_resume():
    state, events = act(PLAN, running(step=1, phase="paused", resume_to="step"), "abort", 9.0)
    assert state == running(step=1, version=5, phase="rolled_back", reason="abort by an operator", updated_at=9.0)
    assert events == [Emitted("rolled_back", 1, 0.0, "abort by an operator")]
