"""policies/rollout_state.py: the transitions, their refusals and the shares they give."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.rollout import GateVerdict, WindowVerdict
from policies.rollout_records import NO_ROLLOUT, TrackShares
from policies.rollout_state import (
    ACTIONS,
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

PLAN = Plan(rollout_id="r1", steps=(0.1, 0.5, 1.0), mirror={"share": 0.2}, pause_after_holds=3, flap_windows=3)


def verdict(*pairs: tuple[str, str]) -> WindowVerdict:
    return WindowVerdict(tuple(GateVerdict(name, v, 20) for name, v in pairs), 100, 20, 0)  # type: ignore[arg-type]


PASS = verdict(("error_rate", "pass"), ("ttft_p95_ratio", "pass"))
FAIL = verdict(("error_rate", "fail"), ("ttft_p95_ratio", "pass"))
HOLD = verdict(("error_rate", "insufficient"), ("ttft_p95_ratio", "pass"))
HOLD_OTHER = verdict(("error_rate", "pass"), ("ttft_p95_ratio", "insufficient"))


def started(plan: Plan = PLAN) -> RolloutState:
    state, _ = act(plan, RolloutState(plan.rollout_id), "start", 1.0)
    return state


def test_start_serves_the_first_step_and_the_mirror():
    state = RolloutState("r1")
    assert shares(PLAN, state) == NO_ROLLOUT
    state, events = act(PLAN, state, "start", 1.0)
    assert state.phase == "step" and state.step == 0 and state.version == 1
    assert [e.kind for e in events] == ["started"]
    assert shares(PLAN, state) == TrackShares(candidate=0.1, mirror=0.2)


def test_passing_windows_promote_step_by_step_to_the_end():
    state = started()
    state, events = window_closed(PLAN, state, 5, PASS, 2.0)
    assert state.step == 1 and events[0].kind == "promoted"
    # the next step serves everything: that is the promotion (no stable is left to judge by)
    state, events = window_closed(PLAN, state, 6, PASS, 3.0)
    assert state.phase == "promoted" and events[0].kind == "completed"
    assert shares(PLAN, state) == TrackShares(candidate=1.0, mirror=0.0)
    partial = Plan(rollout_id="r1", steps=(0.1, 0.5))  # a rollout may end short of everything
    state, _ = window_closed(partial, started(partial), 5, PASS, 2.0)
    assert state.phase == "step" and shares(partial, state).candidate == 0.5
    state, _ = window_closed(partial, state, 6, PASS, 3.0)
    assert state.phase == "promoted" and shares(partial, state).candidate == 1.0


def test_a_single_step_of_everything_is_promoted_at_start():
    plan = Plan(rollout_id="r1", steps=(1.0,))
    state, events = act(plan, RolloutState("r1"), "start", 1.0)
    assert state.phase == "promoted" and events[0].kind == "completed"


def test_a_failing_window_rolls_back_at_once_and_names_the_gate():
    state, events = window_closed(PLAN, started(), 5, FAIL, 2.0)
    assert state.phase == "rolled_back" and "error_rate" in state.reason
    assert events[0].kind == "rolled_back" and events[0].share == 0.0
    assert shares(PLAN, state) == NO_ROLLOUT


def test_a_window_is_judged_once():
    state, _ = window_closed(PLAN, started(), 5, HOLD, 2.0)
    again, events = window_closed(PLAN, state, 5, FAIL, 2.0)
    assert again == state and events == []
    older, _ = window_closed(PLAN, state, 4, FAIL, 2.0)
    assert older == state


def test_holds_in_a_row_pause_for_a_human_and_resume_where_they_were():
    state = started()
    for window in range(1, 4):
        state, events = window_closed(PLAN, state, window, HOLD, 2.0)
    assert state.phase == "paused" and state.resume_to == "step" and events[0].kind == "paused"
    assert shares(PLAN, state) == TrackShares(candidate=0.1, mirror=0.2)  # traffic as it was
    assert window_closed(PLAN, state, 9, FAIL, 3.0)[0] == state  # a paused rollout is not judged
    state, _ = act(PLAN, state, "resume", 4.0)
    assert state.phase == "step" and state.holds == 0


def test_a_verdict_that_flaps_pauses_before_the_hold_limit():
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), pause_after_holds=10, flap_windows=3)
    state = started(plan)
    for window, v in enumerate((HOLD, HOLD_OTHER, HOLD), start=1):
        state, _ = window_closed(plan, state, window, v, 2.0)
    assert state.phase == "paused" and "flapped" in state.reason


def test_a_steady_shortfall_is_not_a_flap():
    assert not flapped(("hold:a", "hold:a", "hold:a"), 3)
    assert flapped(("hold:a", "hold:b", "hold:a"), 3)
    assert not flapped(("hold:a", "hold:b"), 3)


def test_manual_promote_and_abort():
    state, events = act(PLAN, started(), "promote", 2.0)
    assert state.step == 1 and events[0].kind == "promoted"
    state, events = act(PLAN, state, "abort", 3.0)
    assert state.phase == "rolled_back" and events[0].kind == "rolled_back"


def test_final_states_refuse_every_action():
    done, _ = act(PLAN, started(), "abort", 2.0)
    for action in ACTIONS:
        with pytest.raises(TransitionRefused):
            act(PLAN, done, action, 3.0)


def test_refusals_name_what_is_wrong():
    with pytest.raises(TransitionRefused, match="unknown action"):
        act(PLAN, started(), "explode", 1.0)
    with pytest.raises(TransitionRefused, match="started already"):
        act(PLAN, started(), "start", 1.0)
    with pytest.raises(TransitionRefused, match="not paused"):
        act(PLAN, started(), "resume", 1.0)
    with pytest.raises(TransitionRefused, match="start it first"):
        act(PLAN, RolloutState("r1"), "promote", 1.0)


def test_preflight_gates_the_first_step():
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), preflight=True)
    state, _ = act(plan, RolloutState("r1"), "start", 1.0)
    assert state.phase == "preflight" and shares(plan, state) == NO_ROLLOUT
    refused, events = preflight_done(plan, state, ("streaming.done_marker",), 2.0)
    assert refused.phase == "rolled_back" and "streaming.done_marker" in refused.reason
    many, _ = preflight_done(plan, state, tuple(f"check.{i}" for i in range(30)), 2.0)
    assert "check.9 and 20 more" in many.reason and "check.10" not in many.reason
    passed, _ = preflight_done(plan, state, (), 2.0)
    assert passed.phase == "step" and shares(plan, passed).candidate == 0.1


def test_a_state_of_another_rollout_serves_nothing():
    assert shares(PLAN, RolloutState("old", phase="promoted")) == NO_ROLLOUT


def test_state_round_trips_through_a_dict():
    state, _ = window_closed(PLAN, started(), 3, HOLD, 2.0)
    assert RolloutState.from_dict(state.to_dict()) == state


def test_plans_refuse_nonsense():
    with pytest.raises(ValueError):
        Plan(rollout_id="r", steps=())
    with pytest.raises(ValueError):
        Plan(rollout_id="r", steps=(0.5, 0.1))
    with pytest.raises(ValueError):
        Plan(rollout_id="r", mirror={"share": 1.5})
    # The steps rule is the config's (one owner): equal steps and a later 0 are refused too.
    for steps in ((0.5, 0.5), (0.5, 0.0), (1.5,)):
        with pytest.raises(ValueError, match=r"steps \["):
            Plan(rollout_id="r", steps=steps)


EVENTS = st.one_of(
    st.sampled_from(ACTIONS),
    st.sampled_from([PASS, FAIL, HOLD, HOLD_OTHER]),
)


@given(st.lists(EVENTS, max_size=30))
def test_any_event_sequence_keeps_the_invariants(events):
    """The version counts the applied transitions; final states stay final; a share is
    always one of the plan's (or 0 or 1); the step stays in the plan."""
    state = RolloutState("r1")
    window = 0
    for event in events:
        before = state
        try:
            if isinstance(event, str):
                state, _ = act(PLAN, state, event, 1.0)
            else:
                window += 1
                state, _ = window_closed(PLAN, state, window, event, 1.0)
        except TransitionRefused:
            assert state is before
            continue
        assert state.version in (before.version, before.version + 1)
        if before.final:
            assert state == before
        assert 0 <= state.step < len(PLAN.steps)
        assert shares(PLAN, state).candidate in {0.0, 1.0, *PLAN.steps}
        if state.phase == "rolled_back":
            assert not shares(PLAN, state).active


def test_a_steps_first_judged_window_is_the_next_whole_one():
    plan = Plan(rollout_id="r1", steps=(0.1, 0.5, 1.0))  # 60 s windows
    state, _ = act(plan, RolloutState("r1"), "start", 125.0)  # window 2 in progress
    assert state.window == 2
    same, _ = window_closed(plan, state, 2, PASS, 130.0)
    assert same == state  # the window the step began in is not judged
    promoted, _ = window_closed(plan, state, 3, PASS, 181.0)
    assert promoted.step == 1 and promoted.window == 3


def test_an_event_states_the_share_served_after_it_also_for_a_pause_in_preflight():
    """A rollout paused in preflight serves nothing (shares), so its event's share is 0.0,
    not the first step's share it has not started serving."""
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), preflight=True)
    state, events = act(plan, RolloutState("r1", phase="preflight"), "pause", 2.0)
    assert shares(plan, state) == NO_ROLLOUT
    assert events == [Emitted("paused", 0, 0.0, "pause by an operator")]
    resumed, events = act(plan, state, "resume", 3.0)
    assert resumed.phase == "preflight" and events == [Emitted("resumed", 0, 0.0, "resume by an operator")]
