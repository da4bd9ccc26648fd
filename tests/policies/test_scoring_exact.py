"""The scoring picker's exact arithmetic: the tie-break ranks are pinned values (two
gateway replicas of different versions, as in a rolling upgrade, must still send one
prefix to one backend), the bounded-load share at its boundaries, what counts as a
tie, and the time the freshness checks are judged at."""

from __future__ import annotations

import hashlib
import time

import pytest

from adapters.base import GenerationRequest, LoadSnapshot
from policies.pickers import Decision, RouteState, key_digest, max_score, over_bound, tie_rank
from policies.profiles import PROFILES, Profile
from policies.routing import route
from policies.views import BackendView


def chat() -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": "x"}])


def pick(bs: list[BackendView], totals: list[float], key: str, load_factor: float) -> list[BackendView]:
    """The max_score picker alone, at `load_factor`."""
    profile = Profile(scorers={"queue": 1}, load_factor=load_factor)
    return max_score(bs, totals, Decision(key, profile, RouteState()))


def test_the_key_digest_is_the_big_endian_eight_byte_blake2b_of_the_key():
    expected = int.from_bytes(hashlib.blake2b(b"the prompt prefix", digest_size=8).digest(), "big")
    assert key_digest("the prompt prefix") == expected == 5866128424689760741


def test_tie_ranks_are_pinned_so_replicas_of_any_version_agree():
    digest = key_digest("the prompt prefix")
    assert tie_rank(digest, "backend-a") == 9677765105262215901
    assert tie_rank(digest, "backend-b") == 4639572297782337102
    assert tie_rank(digest, "gpu-0") == 2839282492217942031


def test_a_tie_goes_to_the_highest_rank():
    bs = [BackendView(n) for n in ("gpu-0", "backend-b", "backend-a")]
    ordered = pick(bs, [0.5, 0.5, 0.5], "the prompt prefix", 1.25)
    assert [b.name for b in ordered] == ["backend-a", "backend-b", "gpu-0"]


def test_totals_equal_to_nine_decimals_tie_and_a_tenth_of_a_point_does_not():
    bs = [BackendView("low"), BackendView("high")]
    # float noise below 1e-9 is a tie: the hash decides, so each backend wins some keys
    noisy = {pick(bs, [0.5, 0.5 + 2e-10], f"k{i}", 1.25)[0].name for i in range(40)}
    assert noisy == {"low", "high"}
    # a real difference, even one that rounds away at integer precision, orders them
    assert {pick(bs, [0.2, 0.3], f"k{i}", 1.25)[0].name for i in range(40)} == {"high"}


def test_the_bounded_share_counts_this_request_once():
    # 2 in flight + this one = 3; the share of one of two equal backends is
    # ceil(1.25 * 3 / 2) = 2, and a third request on "a" would pass it
    assert over_bound([BackendView("a", inflight=2), BackendView("b")], 1.25) == [True, False]


def test_below_the_load_floor_no_backend_is_past_its_share():
    bs = [BackendView("a", inflight=3), BackendView("b"), BackendView("c")]
    # 4 with this one: the share at factor 2 is ceil(8 / 3) = 3, which "a" holds; a floor of 4 lets it take one more
    assert over_bound(bs, 2.0) == [True, False, False]
    assert over_bound(bs, 2.0, load_floor=4) == [False, False, False]
    bs[0].inflight = 4  # the floor reached, and the share (ceil(10 / 3) = 4) too
    assert over_bound(bs, 2.0, load_floor=4) == [True, False, False]
    with pytest.raises(ValueError, match="load_floor"):
        Profile(scorers={"queue": 1}, load_floor=0)


def test_a_share_that_is_a_whole_number_is_not_rounded_up_by_float_noise():
    # load factor 1, one in flight: the share is exactly 1 and "a" already holds it
    assert over_bound([BackendView("a", inflight=1), BackendView("b")], 1.0) == [True, False]


def test_a_load_factor_of_exactly_one_is_allowed():
    assert Profile(scorers={"queue": 1}, load_factor=1.0).load_factor == 1.0
    with pytest.raises(ValueError):
        Profile(scorers={"queue": 1}, load_factor=0.99)


def test_a_fractional_weight_still_counts_as_using_a_scorer():
    profile = Profile(scorers={"kv": 0.25, "queue": 0.0})
    assert profile.uses("kv") and not profile.uses("queue") and not profile.uses("prefix")


def test_a_total_is_the_weighted_sum_of_the_scores_and_nothing_else():
    bs = [BackendView("a", weight=2.0), BackendView("b", weight=1.0)]
    result = route(Profile(scorers={"weight": 3.0}), bs, chat(), "k")
    assert result.scores == {"a": 3.0, "b": 1.5}


def test_freshness_and_saturation_are_judged_at_the_time_given():
    # At t=1000 "a"'s load is fresh and says it is queueing: it goes last. Judged at
    # the wall clock instead, that load would be decades old and forgotten.
    bs = [BackendView("a", load=LoadSnapshot(waiting=50, read_at=1000.0), session_owner=True), BackendView("b")]
    result = route(PROFILES["blended"], bs, chat(), "k", now=1000.0)
    assert [b.name for b in result.candidates] == ["b", "a"]
    assert result.candidates[1].saturated and result.candidates[1].load is not None


def test_without_a_time_the_wall_clock_is_used():
    bs = [BackendView("a", load=LoadSnapshot(waiting=50, read_at=time.time()), session_owner=True), BackendView("b")]
    assert [b.name for b in route(PROFILES["blended"], bs, chat(), "k").candidates] == ["b", "a"]
