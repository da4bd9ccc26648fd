"""engine/text/stop.py details its mutation run left open: which stop string is
reported when two match at one place, `stopped` is False (not merely falsy) while
nothing matched, and a flush hands the held text over once."""

from __future__ import annotations

from engine.text.stop import ReleasedText, StopStringMatcher


def test_two_stop_strings_matching_at_one_place_report_the_first_listed():
    matcher = StopStringMatcher(["ab", "a"])
    assert matcher.feed("xab") == ReleasedText("x", True)
    assert matcher.matched == "ab"
    other = StopStringMatcher(["a", "ab"])
    assert other.feed("xab") == ReleasedText("x", True) and other.matched == "a"


def test_the_earliest_match_wins_over_the_order_listed():
    matcher = StopStringMatcher(["cd", "b"])
    assert matcher.feed("abcd") == ReleasedText("a", True) and matcher.matched == "b"


def test_text_released_without_a_match_says_not_stopped():
    matcher = StopStringMatcher(["stop"])
    released = matcher.feed("go on")
    assert released.stopped is False and released.text == "go on"
    held = matcher.feed(" st")
    assert held.stopped is False and held.text == " "


def test_a_flush_hands_over_the_held_text_once():
    matcher = StopStringMatcher(["abc"])
    assert matcher.feed("xab") == ReleasedText("x", False)
    assert matcher.flush() == "ab"
    assert matcher.flush() == ""
    assert matcher.feed("z") == ReleasedText("z", False)
