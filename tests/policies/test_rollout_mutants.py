"""What a mutation run of policies/rollout.py left open: each gate's whole verdict (its
limit, its evidence, its detail), the boundaries of min_samples and of each limit at,
below and above, the verdicts' dicts, the Wilson interval's values and the readers of a
mirror's usage differences."""

from __future__ import annotations

import pytest

from policies.rollout import (
    GateLimits,
    GateVerdict,
    WindowVerdict,
    analyse,
    percentile,
    rate_gate,
    total_variation,
    usage_off,
    wilson,
)
from policies.rollout_records import MirrorComparison, TrackRecord

G = GateLimits()
GATES = (
    "ttft_p95_ratio",
    "itl_p95_ratio",
    "error_rate",
    "timeout_rate",
    "finish_reason_distance",
    "tool_call_invalid_rate",
    "structured_invalid_rate",
    "usage_consistency",
    "mirror_difference_rate",
)


def recs(track: str, n: int, **kw: object) -> list[TrackRecord]:
    return [TrackRecord(track=track, at=float(i), **kw) for i in range(n)]  # type: ignore[arg-type]


def good(track: str, n: int, ttft: float = 0.1, itl: float = 0.01, **kw: object) -> list[TrackRecord]:
    return recs(track, n, ttft_s=ttft, itl_s=itl, finish_reason="stop", **kw)


def gates(records: list[TrackRecord], mirrored: list[MirrorComparison] = (), **kw: object) -> dict[str, GateVerdict]:  # type: ignore[assignment]
    v = analyse(records, mirrored, kw.pop("limits", G), **kw)  # type: ignore[arg-type]
    assert tuple(g.gate for g in v.gates) == GATES
    return {g.gate: g for g in v.gates}


def test_a_verdicts_dict_leaves_out_what_was_not_measured():
    assert GateVerdict("g", "pass", 0).to_dict() == {"gate": "g", "verdict": "pass", "n": 0}
    full = GateVerdict("g", "fail", 3, value=0.5, limit=0.1, bound=0.2, detail="d")
    assert full.to_dict() == {
        "gate": "g",
        "verdict": "fail",
        "n": 3,
        "value": 0.5,
        "limit": 0.1,
        "bound": 0.2,
        "detail": "d",
    }
    window = WindowVerdict((full, GateVerdict("h", "pass", 1)), 10, 3, 2, ("x",))
    assert window.to_dict() == {
        "decision": "rollback",
        "stable_n": 10,
        "candidate_n": 3,
        "mirror_n": 2,
        "gates": [full.to_dict(), {"gate": "h", "verdict": "pass", "n": 1}],
        "examples": ["x"],
    }
    assert window.failed == ("g",)
    held = WindowVerdict((GateVerdict("h", "pass", 1), GateVerdict("i", "insufficient", 1)), 1, 1, 0)
    assert held.decision == "hold" and held.failed == () and held.examples == ()


def test_the_wilson_interval_has_its_textbook_values():
    low, high = wilson(5, 100)
    assert low == pytest.approx(0.02154, abs=1e-5) and high == pytest.approx(0.11175, abs=1e-5)
    assert wilson(5, 100, z=1.0) == pytest.approx((0.0323, 0.0766), abs=1e-4)  # centre 0.0545, half 0.0221
    assert wilson(0, 0) == (0.0, 1.0) and wilson(3, -1) == (0.0, 1.0)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0


def test_the_percentile_is_the_nearest_rank():
    assert percentile([3.0, 1.0, 2.0], 0.01) == 1.0  # rank at least 1
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.0  # ceil(0.5 x 4) = rank 2
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.51) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 1.0) == 4.0


def test_total_variation_of_an_empty_side_is_zero_and_of_disjoint_sides_one():
    assert total_variation([], ["stop"]) == 0.0 and total_variation(["stop"], []) == 0.0
    assert total_variation(["stop"], ["length"]) == 1.0
    assert total_variation(["a", "b", "b", "b"], ["a", "a", "a", "b"]) == 0.5


def test_usage_off_is_strictly_beyond_the_tolerance_of_stables_count():
    assert not usage_off("usage: prompt_tokens 102 != 100", 0.02)  # at the tolerance
    assert usage_off("usage: prompt_tokens 103 != 100", 0.02)
    assert not usage_off("usage: prompt_tokens 98 != 100", 0.02)
    assert usage_off("usage: prompt_tokens 1 != 0", 0.6)  # a stable 0 counts as 1
    assert not usage_off("usage: prompt_tokens 0 != 0", 0.0)
    assert usage_off("usage: prompt_tokens 10 != 10 and more", 0.5)  # not the record's wording: off
    assert usage_off("usage: x prompt_tokens 10 != 10", 0.5)
    assert not usage_off("finish: usage: prompt_tokens 10 != 90", 0.0)


def test_a_gate_not_exercised_passes_saying_so():
    assert rate_gate("g", 0, 0, 0.1, 20, exercised=False) == GateVerdict(
        "g", "pass", 0, limit=0.1, detail="not exercised in this window"
    )
    assert rate_gate("g", 0, 0, 0.1, 20) == GateVerdict("g", "insufficient", 0, limit=0.1, bound=0.0)


def test_a_rate_gate_passes_from_min_samples_on_and_fails_on_its_lower_bound():
    assert rate_gate("g", 0, 19, 0.1, 20).verdict == "insufficient"
    at = rate_gate("g", 0, 20, 0.1, 20)
    assert at == GateVerdict("g", "pass", 20, value=0.0, limit=0.1, bound=0.0)
    bad = rate_gate("g", 7, 10, 0.1, 20)
    assert bad == GateVerdict("g", "fail", 10, value=0.7, limit=0.1, bound=round(wilson(7, 10)[0], 6))
    low = wilson(7, 10)[0]
    assert rate_gate("g", 7, 10, low, 20).verdict == "insufficient"  # at the limit: no evidence yet
    assert rate_gate("g", 7, 10, low - 1e-9, 20).verdict == "fail"


def test_the_failure_gates_need_min_samples_of_stable_and_say_its_rate():
    v = gates(good("stable", 19) + good("candidate", 30))
    assert v["error_rate"] == GateVerdict("error_rate", "insufficient", 30, detail="stable served 19 < 20")
    assert v["timeout_rate"].detail == "stable served 19 < 20"
    stable = good("stable", 19) + recs("stable", 1, failure="overload")
    v = gates(stable + good("candidate", 30) + recs("candidate", 1, failure="timeout"))
    assert v["error_rate"].verdict == "pass" and v["error_rate"].detail == "stable rate 0.0500"
    assert v["error_rate"].limit == pytest.approx(0.06) and v["error_rate"].n == 31
    assert v["timeout_rate"].detail == "stable rate 0.0000" and v["timeout_rate"].value == pytest.approx(1 / 31)


def test_a_failure_limit_never_passes_one():
    v = gates(recs("stable", 20, failure="server_error") + recs("candidate", 20, failure="server_error"))
    assert v["error_rate"].limit == 1.0 and v["error_rate"].verdict == "pass"


def test_the_latency_gate_says_what_it_measured():
    v = gates(good("stable", 20, ttft=0.2) + good("candidate", 25, ttft=0.3))
    g = v["ttft_p95_ratio"]
    assert g == GateVerdict(
        "ttft_p95_ratio",
        "pass",
        25,
        value=pytest.approx(1.5),
        limit=1.5,
        bound=0.0,
        detail="stable p95 0.2000s, candidate over 1.5x it: 0/25",
    )
    over = gates(good("stable", 20, ttft=0.2) + good("candidate", 25, ttft=0.30001))["ttft_p95_ratio"]
    assert over.verdict == "fail" and over.detail.endswith("over 1.5x it: 25/25")
    few = gates(good("stable", 19) + good("candidate", 25))["itl_p95_ratio"]
    assert few == GateVerdict("itl_p95_ratio", "insufficient", 25, limit=1.5, detail="stable n 19")


def test_a_latency_of_zero_or_no_candidate_sample_has_no_ratio():
    v = gates(good("stable", 20, ttft=0.0) + good("candidate", 20, ttft=0.0))
    assert v["ttft_p95_ratio"].value is None and v["ttft_p95_ratio"].verdict == "pass"
    assert gates(good("stable", 20))["ttft_p95_ratio"].value is None
    limits = GateLimits(itl_percentile=0.5)
    assert gates(good("stable", 20) + good("candidate", 20), limits=limits)["itl_p95_ratio"].detail.startswith(
        "stable p50 0.0100s"
    )


def test_the_finish_gate_reads_answers_only_and_needs_both_samples():
    stable = good("stable", 20) + recs("stable", 30, finish_reason="length", failure="server_error")
    cand = good("candidate", 15) + recs("candidate", 5, finish_reason="length") + recs("candidate", 9, ttft_s=0.1)
    g = gates(stable + cand)["finish_reason_distance"]
    assert (g.verdict, g.n, g.value, g.limit) == ("fail", 20, 0.25, 0.2)
    at = gates(stable + cand, limits=GateLimits(finish_reason_distance_max=0.25))["finish_reason_distance"]
    assert at.verdict == "pass"
    few = gates(good("stable", 19) + good("candidate", 30))["finish_reason_distance"]
    assert few == GateVerdict("finish_reason_distance", "insufficient", 30, limit=0.2)
    few = gates(good("stable", 30) + good("candidate", 19))["finish_reason_distance"]
    assert few.verdict == "insufficient" and few.n == 19
    third = gates(good("stable", 30) + good("candidate", 20) + recs("candidate", 1, finish_reason="length"))
    assert third["finish_reason_distance"].value == round(1 / 21, 6)


def test_a_validity_gate_holds_to_stables_share_from_min_samples_of_it():
    def limit(stable_n: int) -> float | None:
        stable = good("stable", stable_n - 1, structured_valid=True) + good("stable", 1, structured_valid=False)
        return gates(stable + good("candidate", 20, structured_valid=True))["structured_invalid_rate"].limit

    assert limit(20) == pytest.approx(0.05 + 0.02)
    assert limit(19) == 0.02  # too few stable samples: the max alone
    all_bad = good("stable", 20, structured_valid=False) + good("candidate", 20, structured_valid=False)
    assert gates(all_bad)["structured_invalid_rate"].limit == 1.0


def test_the_mirror_gates_use_the_mirror_limit_and_say_when_nothing_was_mirrored():
    v = gates(good("stable", 20) + good("candidate", 20))
    for name in ("usage_consistency", "mirror_difference_rate"):
        assert v[name] == GateVerdict(name, "pass", 0, limit=0.1, detail="not exercised in this window")
    off = [MirrorComparison(at=1.0, differences=("usage: prompt_tokens 13 != 10",))] * 20
    v = gates(good("stable", 20), off, limits=GateLimits(mirror_difference_rate_max=0.5))
    assert v["usage_consistency"].limit == 0.5 and v["usage_consistency"].value == 1.0


def test_examples_are_five_by_default_and_say_how_the_failures_differ():
    diff = [MirrorComparison(at=1.0, differences=("text",), candidate_failure="timeout")] * 9
    v = analyse([], diff, G)
    assert v.examples == ("text; failure: timeout != None",) * 5 and v.mirror_n == 9
    same = [MirrorComparison(at=1.0, candidate_failure="timeout", stable_failure="timeout")] * 3
    near = [MirrorComparison(at=1.0, differences=("usage: prompt_tokens 101 != 100",))] * 3
    v = analyse([], same + near, G)
    assert v.examples == () and {g.gate: g.value for g in v.gates}["mirror_difference_rate"] == 0.0


def test_min_samples_is_twenty_by_default():
    assert analyse(good("stable", 20) + good("candidate", 20), [], G).decision == "promote"
    assert analyse(good("stable", 20) + good("candidate", 19), [], G).decision == "hold"
    assert analyse(good("stable", 5) + good("candidate", 5), [], G, min_samples=5).decision == "promote"


def test_one_sample_has_an_interval_of_its_own():
    low, high = wilson(1, 1)
    assert low == pytest.approx(0.2065, abs=1e-4) and high == 1.0
    assert wilson(0, 1) == (0.0, pytest.approx(0.7935, abs=1e-4))


def test_the_finish_distance_is_kept_to_six_decimals():
    v = gates(good("stable", 30) + good("candidate", 20) + recs("candidate", 10, finish_reason="length"))
    assert v["finish_reason_distance"].value == 0.333333


def test_a_validity_gate_judges_the_candidate_alone_when_stable_was_never_asked():
    v = gates(good("stable", 20) + good("candidate", 20, tool_calls_valid=True))
    g = v["tool_call_invalid_rate"]
    assert (g.verdict, g.n, g.value, g.detail) == ("pass", 20, 0.0, "")
    few = gates(good("stable", 20, tool_calls_valid=True) + good("candidate", 5, tool_calls_valid=True))
    assert few["tool_call_invalid_rate"].verdict == "insufficient" and few["tool_call_invalid_rate"].n == 5
