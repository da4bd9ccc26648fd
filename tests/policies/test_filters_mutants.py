"""What policies/filters.py's mutation run left open: a track with no backend at all
whose only other-track backends are all down still falls back to them (and says so)."""

from __future__ import annotations

from policies.filters import on_track
from policies.views import BackendView


def test_a_track_without_backends_falls_back_to_the_other_even_when_it_is_down():
    down = [BackendView("s1", healthy=False), BackendView("s2", ejected=True)]
    assert on_track(down, "candidate") == (down, True)


def test_a_track_with_only_down_backends_stays_on_them_when_the_other_is_down_too():
    views = [BackendView("s1", healthy=False), BackendView("c1", track="candidate", ejected=True)]
    assert on_track(views, "stable") == ([views[0]], False)
