"""Cutting a returned stop sequence out of streamed text without leaking any part of it."""

from __future__ import annotations

import itertools

import pytest

from adapters.stop_trim import StopTrimmer


def run(pieces, stops):
    t = StopTrimmer(stops)
    out = [t.feed(p) for p in pieces]
    out.append(t.flush())
    return out


@pytest.mark.parametrize(
    "text,stops,expected",
    [
        ("after the end", ["te"], "af"),
        ("after they both", ["y b"], "after the"),
        ("no match here", ["zz"], "no match here"),
        ("abcabd", ["abd", "ca"], "ab"),
        ("partial te", ["tex"], "partial te"),  # a held prefix that never completes is released at the end
    ],
)
def test_every_split_gives_the_same_text_and_never_leaks(text, stops, expected):
    for cuts in itertools.combinations(range(1, len(text)), 2):
        pieces = [text[i:j] for i, j in zip((0, *cuts), (*cuts, len(text)))]
        out = run(pieces, stops)
        assert "".join(out) == expected, pieces
        released = ""
        for piece in out[:-1]:
            released += piece
            assert not any(s in released for s in stops)


def test_nothing_after_the_stop():
    t = StopTrimmer(["x"])
    assert t.feed("ax") == "a"
    assert t.feed("more") == "" and t.flush() == ""
