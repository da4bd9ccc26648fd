"""Routing by a weighted scoring profile (the max_score picker), end to end on hand-built views: the shared
filters, the weighted scores, ties by consistent hashing, bounded load."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from adapters.base import Capabilities, GenerationRequest, LoadSnapshot
from policies.pickers import Decision, RouteState, key_digest, max_score, over_bound
from policies.profiles import PROFILES, Profile
from policies.routing import route
from policies.saturation import SaturationDetector
from policies.views import BackendView

BLENDED = PROFILES["blended"]


def chat(text: str = "hello") -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": text}])


def pick(bs: list[BackendView], totals: list[float], key: str, load_factor: float) -> list[BackendView]:
    """The max_score picker alone, at `load_factor`."""
    profile = Profile(scorers={"queue": 1}, load_factor=load_factor)
    return max_score(bs, totals, Decision(key, profile, RouteState()))


def names(result) -> list[str]:
    return [b.name for b in result.candidates]


def first(profile, bs, key="k", **kw) -> str:
    return route(profile, bs, chat(), key, **kw).candidates[0].name


def test_profiles_check_their_scorers_weights_and_load_factor():
    with pytest.raises(ValueError, match="unknown scorers"):
        Profile(scorers={"prefix": 1, "latency": 2})
    with pytest.raises(ValueError, match="not negative"):
        Profile(scorers={"queue": -1})
    with pytest.raises(ValueError, match="load_factor"):
        Profile(scorers={"queue": 1}, load_factor=0.9)
    assert Profile(scorers={"queue": 1, "kv": 0}).active == [("queue", 1)]
    assert BLENDED.uses("prefix") and not Profile(scorers={"queue": 1}).uses("prefix", "session")


def test_the_shared_filters_run_before_the_scores():
    bs = [
        BackendView("tgi", adapter="tgi", capabilities=Capabilities(tools=False), prefix_approx=1.0),
        BackendView("sick", healthy=False, prefix_approx=1.0),
        BackendView("ejected", ejected=True, prefix_approx=1.0),
        BackendView("ok"),
        BackendView("ok2"),
    ]
    req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "x"}], tools=[{"type": "function"}])
    result = route(BLENDED, bs, req, "k")
    assert sorted(names(result)) == ["ok", "ok2"]
    assert [str(g) for g in result.refused] == ["tgi (tgi) does not support tool calls"]
    assert set(result.scores) == {"ok", "ok2"}


def test_when_every_capable_backend_is_ejected_they_still_serve():
    bs = [BackendView("a", ejected=True), BackendView("b", ejected=True, healthy=False)]
    assert names(route(BLENDED, bs, chat(), "k")) == ["a"]


def test_saturated_backends_go_last_whatever_their_score():
    bs = [
        BackendView("warm", prefix_approx=1.0, session_owner=True, load=LoadSnapshot(waiting=9)),
        BackendView("cold", prefix_approx=0.0),
    ]
    result = route(BLENDED, bs, chat(), "k")
    assert names(result) == ["cold", "warm"]
    assert result.candidates[1].saturated
    assert result.scores["warm"] > result.scores["cold"]  # it scored best and still went last


def test_a_warm_prefix_beats_a_small_load_difference_and_loses_to_a_large_one():
    profile = Profile(scorers={"prefix": 3, "queue": 2, "kv": 2, "inflight": 2})
    warm = dict(prefix_approx=1.0, load=LoadSnapshot(waiting=1, kv_usage=0.2))
    cold = dict(prefix_approx=0.0, load=LoadSnapshot(waiting=0, kv_usage=0.1))
    assert first(profile, [BackendView("warm", inflight=2, **warm), BackendView("cold", inflight=1, **cold)]) == "warm"
    busy = dict(prefix_approx=1.0, load=LoadSnapshot(waiting=4, kv_usage=0.7))
    assert first(profile, [BackendView("warm", inflight=2, **busy), BackendView("cold", inflight=1, **cold)]) == "cold"


def test_the_session_owner_wins_while_it_is_a_candidate():
    owner = BackendView("owner", session_owner=True, inflight=6, load=LoadSnapshot(waiting=4, kv_usage=0.7))
    rival = BackendView("rival", prefix_approx=1.0)
    assert first(BLENDED, [rival, owner]) == "owner"
    assert first(BLENDED, [rival, BackendView("owner", session_owner=True, healthy=False)]) == "rival"


def test_stale_load_is_not_trusted_by_the_scorers():
    now = time.time()
    stale = LoadSnapshot(waiting=4, kv_usage=0.75, read_at=now - 60)
    fresh = LoadSnapshot(waiting=1, kv_usage=0.2, read_at=now - 1)
    profile = Profile(scorers={"queue": 1, "kv": 1})
    bs = [BackendView("fresh", load=fresh), BackendView("stale", load=stale)]
    result = route(profile, bs, chat(), "k", SaturationDetector(max_load_age_s=5), now=now)
    # The stale backend takes the mean of the fresh scores: neither better nor worse.
    assert result.scores["stale"] == pytest.approx(result.scores["fresh"])


def test_ties_go_by_consistent_hashing_of_the_key():
    bs = [BackendView(n) for n in "abcd"]
    for key in ("system prompt one", "another prompt", "third"):
        assert len({first(BLENDED, bs, key) for _ in range(5)}) == 1
    spread = Counter(first(BLENDED, bs, f"key-{i}") for i in range(400))
    assert set(spread) == set("abcd") and min(spread.values()) > 60
    # Removing a backend moves only the keys it had.
    before = {f"k{i}": first(BLENDED, bs, f"k{i}") for i in range(200)}
    after = {k: first(BLENDED, bs[:3], k) for k in before}
    assert all(after[k] == v for k, v in before.items() if v != "d")


def test_ranks_are_stable_across_processes():
    # blake2b of the key and of each name, mixed by arithmetic: no per-process hash seed.
    assert key_digest("a prompt") == key_digest("a prompt") != key_digest("another")
    code = "from policies.pickers import tie_rank, key_digest; print(tie_rank(key_digest('p'), 'b1'))"
    ranks = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(ranks) == 1


def test_bounded_load_moves_the_overflow_of_a_hot_prefix():
    # Everyone wants "hot" (its prefix is there); in-flight counts are the gateway's own.
    bs = [
        BackendView("hot", inflight=5, prefix_approx=1.0),
        BackendView("b", inflight=1, prefix_approx=0.0),
        BackendView("c", inflight=0, prefix_approx=0.0),
    ]
    # 6 in flight + this one over 3 backends: a share of 7/3; 1.25 times that, rounded up, is 3.
    assert over_bound(bs, 1.25) == [True, False, False]
    result = route(Profile(scorers={"prefix": 3}), bs, chat(), "k")
    assert names(result)[-1] == "hot"
    # Below the bound the prefix keeps it.
    calm = [
        BackendView("hot", inflight=2, prefix_approx=1.0),
        BackendView("b", inflight=2, prefix_approx=0.0),
        BackendView("c", inflight=2, prefix_approx=0.0),
    ]
    assert first(Profile(scorers={"prefix": 3}), calm) == "hot"


def test_bounded_load_follows_weights_and_spares_the_session_owner():
    heavy = [BackendView("big", inflight=6, weight=3), BackendView("small", inflight=2, weight=1)]
    # 8 in flight + this one = 9: big's bound is 9 × 3/4 × 1.25 rounded up, 9; small's 9 × 1/4 × 1.25, 3.
    assert over_bound(heavy, 1.25) == [False, False]
    owner = [BackendView("owner", inflight=9, session_owner=True), BackendView("idle", inflight=0)]
    assert over_bound(owner, 1.0) == [False, False]
    assert over_bound([BackendView("x", inflight=9), BackendView("idle", inflight=0)], 1.0) == [True, False]


def test_the_least_loaded_always_fits_the_bound():
    for loads in ([0, 0, 0], [1, 1], [5, 0, 0, 0], [3, 7, 2, 9, 4]):
        bs = [BackendView(f"b{i}", inflight=n) for i, n in enumerate(loads)]
        least = min(range(len(loads)), key=lambda i: loads[i])
        assert not over_bound(bs, 1.0)[least], loads


def test_pick_orders_by_total_then_bound():
    bs = [BackendView("a", inflight=9), BackendView("b"), BackendView("c")]
    assert [b.name for b in pick(bs, [3.0, 2.0, 1.0], "k", 1.25)] == ["b", "c", "a"]


def test_each_candidate_has_its_total():
    bs = [BackendView(f"b{i}", inflight=i, prefix_approx=i / 8) for i in range(8)]
    result = route(BLENDED, bs, chat(), "k")
    assert len(result.scores) == 8
