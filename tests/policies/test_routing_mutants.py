"""What policies/routing.py's mutation run left open: a result without a track says
it did not fall back (False, not merely falsy), and a profile without scorers reports
no scores at all."""

from __future__ import annotations

from adapters.base import GenerationRequest
from policies.profiles import PROFILES
from policies.routing import route
from policies.views import BackendView


def chat() -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": "hello"}])


def test_without_a_track_the_result_did_not_fall_back():
    views = [BackendView("a"), BackendView("b", track="candidate")]
    result = route(PROFILES["round_robin"], views, chat())
    assert result.fell_back is False
    assert {b.name for b in result.candidates} == {"a", "b"}


def test_a_track_taken_from_the_other_side_is_reported_as_a_fallback():
    views = [BackendView("a", healthy=False), BackendView("b", track="candidate")]
    result = route(PROFILES["round_robin"], views, chat(), track="stable")
    assert result.fell_back is True and [b.name for b in result.candidates] == ["b"]


def test_a_profile_without_scorers_reports_no_scores():
    for name in ("round_robin", "weighted", "least_loaded", "prefix_affinity"):
        assert route(PROFILES[name], [BackendView("a"), BackendView("b")], chat()).scores == {}


def test_a_profile_with_scorers_reports_every_candidates_total():
    assert set(route(PROFILES["blended"], [BackendView("a"), BackendView("b")], chat()).scores) == {"a", "b"}
