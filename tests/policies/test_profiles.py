"""Routing profiles (policies/profiles.py): what a profile may say, and an explicit
profile naming a plain picker routes exactly as the plain policy of that name."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest, LoadSnapshot
from policies.pickers import RouteState
from policies.profiles import PROFILES, Profile, profile_of
from policies.routing import route
from policies.views import BackendView


def chat(text: str) -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": text}])


def test_a_name_is_its_profile_and_a_profile_is_itself():
    assert profile_of("precise") is PROFILES["precise"]
    explicit = Profile(scorers={"queue": 1})
    assert profile_of(explicit) is explicit and explicit.picker == "max_score"


@pytest.mark.parametrize("name", ["round_robin", "weighted", "least_loaded", "prefix_affinity"])
def test_an_explicit_profile_of_a_plain_picker_routes_as_the_plain_policy(name):
    views = [
        BackendView("a", weight=2, inflight=3),
        BackendView("b", inflight=1, load=LoadSnapshot(waiting=1)),
        BackendView("c", weight=0.5),
    ]
    named, explicit = RouteState(), RouteState()
    for i in range(12):
        a = route(PROFILES[name], views, chat(f"prompt {i}"), state=named)
        b = route(Profile(picker=name), views, chat(f"prompt {i}"), state=explicit)
        assert [v.name for v in a.candidates] == [v.name for v in b.candidates]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"picker": "round_robin", "scorers": {"queue": 1}}, "reads no scores"),
        ({"picker": "least_loaded", "load_factor": 2}, "no load bound"),
        ({"picker": "weighted", "load_floor": 3}, "no load bound"),
        ({"scorers": {"queue": 0, "kv": 0}}, "at least one must be positive"),
        ({"scorers": {}}, "at least one must be positive"),
        ({"scorers": {"queue": float("inf")}}, "finite and not negative"),
        ({"scorers": {"queue": 1}, "picker": "fastest"}, "picker"),
        ({"scorers": {"queue": 1}, "weights": {"queue": 1}}, "weights"),
    ],
)
def test_a_profile_that_says_something_its_picker_cannot_use_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        Profile(**fields)


def test_a_plain_picker_needs_nothing_but_its_name():
    assert Profile(picker="prefix_affinity").scorers == {} and not Profile(picker="weighted").active
