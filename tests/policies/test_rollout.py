"""policies/rollout.py: each gate's pass, fail and insufficient, and the Wilson rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.rollout import GateLimits, analyse, percentile, total_variation, usage_off, wilson
from policies.rollout_records import MirrorComparison, TrackRecord

G = GateLimits()
MIN_SAMPLES = 20  # analyse's default


def recs(track, n, **kw):
    return [TrackRecord(track=track, at=float(i), **kw) for i in range(n)]


def good(track, n, ttft=0.1, itl=0.01, **kw):
    return recs(track, n, ttft_s=ttft, itl_s=itl, finish_reason="stop", prompt_tokens=10, **kw)


def gate(verdict, name):
    return next(g for g in verdict.gates if g.gate == name)


def test_a_like_candidate_with_enough_samples_is_promoted():
    v = analyse(good("stable", 200) + good("candidate", 40), [], G)
    assert v.decision == "promote", v.to_dict()
    assert v.stable_n == 200 and v.candidate_n == 40


def test_too_few_candidate_requests_hold_never_promote():
    v = analyse(good("stable", 200) + good("candidate", 19), [], G)
    assert v.decision == "hold"
    assert gate(v, "error_rate").verdict == "insufficient"
    assert gate(v, "ttft_p95_ratio").verdict == "insufficient"


def test_an_empty_window_holds():
    assert analyse([], [], G).decision == "hold"


def test_five_percent_server_errors_fail_the_error_gate_within_one_window():
    cand = good("candidate", 19) + recs("candidate", 1, failure="server_error")
    v = analyse(good("stable", 400) + cand, [], GateLimits(error_rate_max_delta=0.005))
    assert gate(v, "error_rate").verdict == "fail"
    assert v.decision == "rollback" and v.failed == ("error_rate",)


def test_one_unlucky_error_is_not_evidence_against_a_candidate_when_stable_errs_too():
    stable = good("stable", 380) + recs("stable", 20, failure="server_error")  # 5%
    cand = good("candidate", 38) + recs("candidate", 2, failure="server_error")  # 5%
    v = analyse(stable + cand, [], G)
    assert gate(v, "error_rate").verdict == "pass"


def test_a_disaster_fails_before_min_samples():
    cand = recs("candidate", 10, failure="server_error")
    v = analyse(good("stable", 400) + cand, [], G)
    assert gate(v, "error_rate").verdict == "fail"


def test_timeouts_are_their_own_gate():
    cand = good("candidate", 20) + recs("candidate", 10, failure="timeout")
    v = analyse(good("stable", 400) + cand, [], G)
    assert gate(v, "timeout_rate").verdict == "fail"
    assert gate(v, "error_rate").verdict == "pass"


def test_doubled_ttft_fails_the_latency_gate():
    v = analyse(good("stable", 200, ttft=0.05) + good("candidate", 25, ttft=0.1), [], G)
    g = gate(v, "ttft_p95_ratio")
    assert g.verdict == "fail" and g.value is not None and 1.9 < g.value < 2.1


def test_doubled_itl_fails_its_gate():
    v = analyse(good("stable", 200, itl=0.01) + good("candidate", 25, itl=0.02), [], G)
    assert gate(v, "itl_p95_ratio").verdict == "fail"
    assert gate(v, "ttft_p95_ratio").verdict == "pass"


def test_finish_reasons_far_apart_fail():
    cand = recs("candidate", 30, finish_reason="length", ttft_s=0.1, itl_s=0.01)
    v = analyse(good("stable", 200) + cand, [], G)
    g = gate(v, "finish_reason_distance")
    assert g.verdict == "fail" and g.value == 1.0


def test_invalid_tool_calls_fail_and_unasked_tool_calls_are_not_judged():
    cand = good("candidate", 30, tool_calls_valid=False)
    v = analyse(good("stable", 200, tool_calls_valid=True) + cand, [], G)
    assert gate(v, "tool_call_invalid_rate").verdict == "fail"
    plain = analyse(good("stable", 200) + good("candidate", 30), [], G)
    g = gate(plain, "tool_call_invalid_rate")
    assert g.verdict == "pass" and g.n == 0


def test_tool_calls_asked_only_of_stable_leave_the_candidate_insufficient():
    v = analyse(good("stable", 200, tool_calls_valid=True) + good("candidate", 30), [], G)
    assert gate(v, "tool_call_invalid_rate").verdict == "insufficient"
    assert v.decision == "hold"


def test_invalid_structured_output_fails():
    cand = good("candidate", 30, structured_valid=False)
    v = analyse(good("stable", 100, structured_valid=True) + cand, [], G)
    assert gate(v, "structured_invalid_rate").verdict == "fail"


def test_usage_counted_differently_fails_on_the_mirror_and_within_tolerance_passes():
    off = [MirrorComparison(at=1.0, differences=("usage: prompt_tokens 13 != 10",)) for _ in range(20)]
    v = analyse(good("stable", 200) + good("candidate", 30), off, G, mirror_on=True)
    assert gate(v, "usage_consistency").verdict == "fail"
    assert v.examples and "usage" in v.examples[0]
    near = [MirrorComparison(at=1.0, differences=("usage: prompt_tokens 101 != 100",)) for _ in range(20)]
    v = analyse(good("stable", 200) + good("candidate", 30), near, G, mirror_on=True)
    assert gate(v, "usage_consistency").verdict == "pass"
    assert gate(v, "mirror_difference_rate").verdict == "pass"


def test_a_mirror_that_was_meant_to_run_but_compared_nothing_is_insufficient():
    v = analyse(good("stable", 200) + good("candidate", 30), [], G, mirror_on=True)
    assert gate(v, "mirror_difference_rate").verdict == "insufficient"


def test_mirror_differences_fail_and_examples_are_bounded():
    diff = [MirrorComparison(at=1.0, differences=("tool_call: arguments not JSON",)) for _ in range(50)]
    v = analyse(good("stable", 200) + good("candidate", 30), diff, G, mirror_on=True, examples_max=3)
    assert gate(v, "mirror_difference_rate").verdict == "fail"
    assert len(v.examples) == 3


def test_a_candidate_failing_where_stable_answered_is_a_mirror_difference():
    diff = [MirrorComparison(at=1.0, candidate_failure="server_error") for _ in range(30)]
    v = analyse(good("stable", 200) + good("candidate", 30), diff, G, mirror_on=True)
    assert gate(v, "mirror_difference_rate").verdict == "fail"
    assert "failure: server_error != None" in v.examples[0]


def test_usage_off_reads_the_records_wording():
    assert usage_off("usage: prompt_tokens 41 != 40", 0.0)
    assert not usage_off("usage: prompt_tokens 41 != 40", 0.05)
    assert usage_off("usage: something else", 0.5)
    assert not usage_off("finish_reason: stop != length", 0.0)


def test_percentile_and_total_variation():
    assert percentile([5, 1, 2, 3, 4], 0.95) == 5
    assert percentile([1.0] * 20 + [9.0], 0.95) == 1.0
    assert total_variation(["stop"] * 3, ["stop"] * 5) == 0.0
    assert total_variation(["stop", "length"], ["stop", "stop"]) == 0.5


@given(st.integers(min_value=0, max_value=500), st.integers(min_value=1, max_value=500))
def test_the_wilson_interval_holds_the_proportion_inside_zero_and_one(k, n):
    k = min(k, n)
    low, high = wilson(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0


@given(st.integers(min_value=1, max_value=300))
def test_a_clean_candidate_never_fails_a_rate_gate_at_any_sample_size(n):
    v = analyse(good("stable", 100) + good("candidate", n), [], G)
    assert "fail" not in {g.verdict for g in v.gates}
    assert v.decision == ("promote" if n >= MIN_SAMPLES else "hold")


@given(st.integers(min_value=0, max_value=MIN_SAMPLES - 1), st.integers(min_value=0, max_value=400))
def test_fewer_than_min_samples_never_promotes(n_cand, n_stable):
    v = analyse(good("stable", n_stable) + good("candidate", n_cand), [], G)
    assert v.decision != "promote"


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=200))
def test_more_failures_never_turn_a_failing_gate_into_a_passing_one(n, extra):
    bad = recs("candidate", n, failure="server_error")
    base = analyse(good("stable", 200) + bad, [], G)
    more = analyse(good("stable", 200) + bad + recs("candidate", extra, failure="server_error"), [], G)
    if gate(base, "error_rate").verdict == "fail":
        assert gate(more, "error_rate").verdict == "fail"


def test_a_stable_that_fails_tool_calls_too_holds_the_candidate_to_its_own_share():
    stable = good("stable", 90, tool_calls_valid=True) + good("stable", 10, tool_calls_valid=False)  # 10%
    cand = good("candidate", 36, tool_calls_valid=True) + good("candidate", 4, tool_calls_valid=False)  # 10%
    v = analyse(stable + cand, [], G)
    g = gate(v, "tool_call_invalid_rate")
    assert g.verdict == "pass" and g.limit == pytest.approx(0.12)


def test_the_latency_percentile_is_configurable():
    stable = good("stable", 90, ttft=0.1) + good("stable", 10, ttft=1.0)  # p95 1.0, p50 0.1
    cand = good("candidate", 40, ttft=0.3)
    assert gate(analyse(stable + cand, [], G), "ttft_p95_ratio").verdict == "pass"
    median = GateLimits(ttft_percentile=0.5)
    assert gate(analyse(stable + cand, [], median), "ttft_p95_ratio").verdict == "fail"
