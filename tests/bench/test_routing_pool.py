"""The repetitions of `make bench-routing`: the rotated order and the pooled rows
(bench/routing_pool.py), pure functions over hand-made runs."""

from __future__ import annotations

from typing import Any

import bench
from bench.routing_pool import pool, rotation, schedule, within_spread
from bench.routing_report import precise_verdict

POLICIES = ("round_robin", "prefix_affinity", "blended_precise")


def test_this_tree_is_the_one_tested():
    assert bench.__file__.startswith(str(__import__("pathlib").Path(__file__).resolve().parents[2]))


def test_repetition_k_starts_at_policy_k_and_every_policy_takes_every_place():
    assert rotation(POLICIES, 0) == POLICIES
    assert rotation(POLICIES, 1) == ("prefix_affinity", "blended_precise", "round_robin")
    assert rotation(POLICIES, 4) == rotation(POLICIES, 1)  # wraps
    order = schedule(POLICIES, 3)
    assert len(order) == 9 and [k for k, _ in order] == [0] * 3 + [1] * 3 + [2] * 3
    for place in range(3):  # each policy once in each place: none always last
        assert {order[3 * k + place][1] for k in range(3)} == set(POLICIES)
    assert schedule(POLICIES, 1) == [(0, p) for p in POLICIES] and rotation((), 2) == ()


def run(policy: str, rate: float, ttft_ms: list[float], hits: float, queries: float, served: dict[str, int]) -> dict:
    return {
        "policy": policy,
        "rate": rate,
        "requests": len(ttft_ms),
        "ok": len(ttft_ms),
        "failed": 0,
        "queries": queries,
        "hits": hits,
        "ttft_s": [t / 1000 for t in ttft_ms],
        "tpot_s": [0.001] * len(ttft_ms),
        "ttft_p99_ms": max(ttft_ms),  # what summarize would give for a handful of samples, near enough
        "goodput_rps": len(ttft_ms) / 10,
        "served": served,
    }


def test_a_row_pools_its_repetitions_not_averages_them():
    runs = [
        run("a", 5.0, [10.0] * 99 + [500.0], hits=90, queries=100, served={"x": 60, "y": 40}),
        run("b", 1.0, [20.0] * 10, hits=1, queries=10, served={"x": 10, "y": 0}),
        run("a", 5.0, [10.0] * 100, hits=0, queries=900, served={"x": 40, "y": 60}),
    ]
    rows = pool(runs)
    assert [(r["policy"], r["rate"]) for r in rows] == [("b", 1.0), ("a", 5.0)]  # rates ascending
    a = rows[1]
    assert a["repeats"] == 2 and a["requests"] == a["ok"] == 200
    assert a["hit_rate"] == 90 / 1000  # summed counters: not the mean of 0.9 and 0.0
    assert a["served"] == {"x": 100, "y": 100} and a["load_ratio"] == 1.0  # 1.5 and 0.67 per run, even pooled
    assert a["goodput_rps"] == (10.0 + 10.0) / 2
    # One slow request among 200 is past the pooled p99's rank: one run's outlier no longer is the tail.
    assert a["ttft_p99_ms"] < 100 and a["ttft_p99_spread_ms"] == [10.0, 500.0]
    assert rows[0]["load_ratio"] is None and rows[0]["ttft_p99_spread_ms"] == [20.0, 20.0]


def row(policy: str, p99: float, lo: float, hi: float) -> dict[str, Any]:
    return {
        "policy": policy,
        "rate": 5.0,
        "ttft_p99_ms": p99,
        "ttft_p99_spread_ms": [lo, hi],
        "goodput_rps": 15.0,
        "hit_rate": 0.9,
        "served": {"x": 1, "y": 1},
    }


def test_a_difference_smaller_than_the_spread_is_called_so():
    precise, rival = row("blended_precise", 80.0, 70.0, 95.0), row("prefix_affinity", 78.0, 75.0, 82.0)
    assert within_spread(precise, rival) and within_spread(rival, precise)
    far = row("round_robin", 200.0, 190.0, 210.0)
    assert not within_spread(precise, far)  # 120 ms apart, spreads of 25 and 20
    (line,) = precise_verdict([precise, rival, far])
    assert "best TTFT p99 **no**" in line and "within the spread" in line and "70.0-95.0" in line
    # Winning by more than either spread: no caveat.
    (line,) = precise_verdict([row("blended_precise", 50.0, 45.0, 55.0), far])
    assert "best TTFT p99 **yes**" in line and "within the spread" not in line
    # Winning by less than it: the caveat names the runner-up.
    (line,) = precise_verdict([row("blended_precise", 77.0, 70.0, 90.0), rival])
    assert "**yes**" in line and "within the spread" in line and "of prefix_affinity 75.0-82.0" in line


def test_a_goodput_behind_by_less_than_the_runs_differ_is_called_so():
    precise = {**row("blended_precise", 50.0, 45.0, 55.0), "goodput_rps": 14.9, "goodput_spread_rps": [14.8, 15.0]}
    rival = {**row("blended", 60.0, 58.0, 62.0), "goodput_rps": 15.0, "goodput_spread_rps": [15.0, 15.0]}
    (line,) = precise_verdict([precise, rival])
    assert "best goodput **no**" in line and "per-run goodput of blended_precise 14.8-15.0" in line
    # Behind by more than the spread: no caveat.
    far = {**rival, "goodput_rps": 16.0, "goodput_spread_rps": [15.9, 16.1]}
    (line,) = precise_verdict([precise, far])
    assert "best goodput **no**" in line and "per-run goodput" not in line
