"""The `precise` profile (policies/profiles.py): the prefix a KV-event index
vouches for wins until its backend is really loaded; load decides among close
matches; the bounded load lets a backend hold four in flight, or two thirds of what
is in flight where that is more, not more; saturation still sends the holder last."""

from __future__ import annotations

import time

from adapters.base import GenerationRequest, LoadSnapshot
from policies.profiles import PROFILES, Profile
from policies.routing import route
from policies.saturation import SaturationDetector
from policies.views import BackendView

BLENDED, PRECISE = PROFILES["blended"].scorers, PROFILES["precise"]

DETECTOR = SaturationDetector(queue_depth=5, kv_cache_utilization=0.8)
PROFILE = PRECISE


def chat() -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": "x"}])


def view(name: str, precise: float, inflight: int = 0, waiting: int = 0, kv: float = 0.1) -> BackendView:
    load = LoadSnapshot(waiting=waiting, running=inflight, kv_usage=kv, read_at=time.time())
    return BackendView(name, inflight=inflight, load=load, prefix_precise=precise)


def first(profile: Profile, views: list[BackendView]) -> str:
    return route(profile, views, chat(), "key", DETECTOR).candidates[0].name


def test_a_whole_match_wins_over_less_loaded_backends_until_its_holder_nears_saturation():
    # 4 waiting of 5, KV at 0.6 of 0.8, twice the others' in-flight: loaded, not saturated.
    views = [view("holder", 0.95, inflight=4, waiting=4, kv=0.6), view("b", 0.0, 2), view("c", 0.0, 2)]
    assert first(PROFILE, views) == "holder"
    # The blended weights give the holder up (the case the precise profile is for).
    assert first(Profile(scorers=BLENDED, load_factor=PRECISE.load_factor), views) != "holder"
    # One more waiting and the saturation filter sends it last.
    views[0].load = LoadSnapshot(waiting=5, running=4, kv_usage=0.6, read_at=time.time())
    assert first(PROFILE, views) != "holder"


def test_a_saturated_holder_goes_last_whatever_its_match():
    views = [view("holder", 1.0, waiting=5), view("cold", 0.0)]
    assert first(PROFILE, views) == "cold"


def test_a_cold_prefix_goes_to_the_least_loaded_backend():
    views = [view("a", 0.01, inflight=2), view("b", 0.01, inflight=0), view("c", 0.01, inflight=1)]
    assert first(PROFILE, views) == "b"


def test_between_two_holders_of_the_prompt_the_less_loaded_one_wins():
    views = [view("a", 0.95, inflight=3), view("b", 0.90, inflight=0), view("c", 0.0)]
    assert first(PROFILE, views) == "b"


def test_the_holder_of_one_request_in_flight_takes_the_second_where_1_25_would_spill_it():
    views = [view("holder", 0.95, inflight=1), view("b", 0.0), view("c", 0.0)]
    assert first(PROFILE, views) == "holder"
    tight = Profile(scorers=PRECISE.scorers, load_factor=1.25)
    assert first(tight, views) != "holder"


def test_below_four_in_flight_the_holder_keeps_its_prefix_whatever_the_share():
    views = [view("holder", 0.95, inflight=3), view("second", 0.5), view("cold", 0.0)]
    # 4 with this one: twice the share is ceil(2 x 4 / 3) = 3, which the holder holds, but the floor is 4.
    assert first(PROFILE, views) == "holder"
    assert (
        first(Profile(scorers=PRECISE.scorers, load_factor=PRECISE.load_factor), views) == "second"
    )  # no floor: spilled


def test_past_the_floor_and_two_thirds_of_what_is_in_flight_the_next_best_takes_the_overflow():
    views = [view("holder", 0.95, inflight=4), view("second", 0.5), view("cold", 0.0)]
    # 5 with this one: twice the share is ceil(2 x 5 / 3) = 4, the floor 4: the holder has both.
    assert first(PROFILE, views) == "second"
    views[2].inflight = 3  # 8 with this one: the share is now 6, the holder has room again
    assert first(PROFILE, views) == "holder"
