"""The track filter of the one routing pipeline (policies/filters.py `on_track`, run by
policies/routing.py `route`): a request under rollout is served by its track's
backends, by the other track's only when its own has none serving, and a model
without rollout runs no such step."""

from __future__ import annotations

from adapters.base import Capabilities, GenerationRequest
from policies.filters import on_track
from policies.profiles import PROFILES
from policies.routing import route
from policies.views import BackendView

ROUND_ROBIN, BLENDED = PROFILES["round_robin"], PROFILES["blended"]


def chat() -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": "hello"}])


def fleet(**candidate) -> list[BackendView]:
    return [
        BackendView("s1"),
        BackendView("s2"),
        BackendView("c1", track="candidate", **candidate),
    ]


def names(result) -> list[str]:
    return [b.name for b in result.candidates]


def test_each_track_is_served_by_its_own_backends_under_every_profile():
    for profile in (ROUND_ROBIN, BLENDED):
        for _ in range(4):
            assert names(route(profile, fleet(), chat(), track="candidate")) == ["c1"]
            assert sorted(names(route(profile, fleet(), chat(), track="stable"))) == ["s1", "s2"]


def test_without_a_track_every_backend_is_a_candidate():
    result = route(ROUND_ROBIN, fleet(), chat())
    assert sorted(names(result)) == ["c1", "s1", "s2"] and not result.fell_back


def test_a_candidate_track_with_no_serving_backend_falls_back_to_stable():
    for down in ({"healthy": False}, {"ejected": True}):
        result = route(ROUND_ROBIN, fleet(**down), chat(), track="candidate")
        assert sorted(names(result)) == ["s1", "s2"] and result.fell_back


def test_a_stable_track_down_falls_back_to_the_candidate():
    views = [BackendView("s1", healthy=False), BackendView("c1", track="candidate")]
    result = route(ROUND_ROBIN, views, chat(), track="stable")
    assert names(result) == ["c1"] and result.fell_back


def test_with_both_tracks_down_the_request_stays_on_its_own_and_fails_over_there():
    views = [BackendView("s1", healthy=False), BackendView("c1", track="candidate", healthy=False)]
    result = route(ROUND_ROBIN, views, chat(), track="candidate")
    assert names(result) == ["c1"] and not result.fell_back


def test_a_candidate_lacking_a_capability_the_request_needs_leaves_it_to_stable():
    views = fleet(capabilities=Capabilities(tools=False))
    req = GenerationRequest("r", "m", messages=[], tools=[{"type": "function", "function": {"name": "f"}}])
    result = route(ROUND_ROBIN, views, req, track="candidate")
    assert sorted(names(result)) == ["s1", "s2"] and result.fell_back
    assert [gap.backend for gap in result.refused] == ["c1"]


def test_on_track_alone():
    views = fleet()
    assert on_track(views, "candidate") == ([views[2]], False)
    assert on_track(views, "stable") == (views[:2], False)
    assert on_track([], "stable") == ([], False)
