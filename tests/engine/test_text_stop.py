"""Stop strings: matched across any split of the text, never leaked, excluded from output.

One matcher serves the native engine and the TGI adapter (which cuts the stop sequence
TGI returns); both uses are tested here."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.text.stop import ReleasedText, StopStringMatcher


def run(stops: list[str], chunks: list[str]) -> tuple[list[str], bool]:
    matcher = StopStringMatcher(stops)
    out, stopped = [], False
    for chunk in chunks:
        released = matcher.feed(chunk)
        out.append(released.text)
        stopped = released.stopped
        if stopped:
            break
    if not stopped:
        out.append(matcher.flush())
    return out, stopped


def all_splits(text: str) -> list[list[str]]:
    """Every way to cut `text` into two or three pieces."""
    cuts = []
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            cuts.append([text[:i], text[i:j], text[j:]])
    return cuts


@pytest.mark.parametrize("chunks", all_splits("Hello wor<END>ld"))
def test_stop_string_across_every_boundary(chunks: list[str]) -> None:
    out, stopped = run(["<END>"], chunks)
    assert stopped
    assert "".join(out) == "Hello wor"


@pytest.mark.parametrize("chunks", all_splits("a <EN b <E"))
def test_partial_stop_is_held_then_released(chunks: list[str]) -> None:
    out, stopped = run(["<END>"], chunks)
    assert not stopped
    assert "".join(out) == "a <EN b <E"
    # Nothing that could start "<END>" is shown before it is known not to.
    shown = ""
    for piece in out[:-1]:
        shown += piece
        assert not shown.endswith(("<", "<E", "<EN", "<END"))


def test_earliest_of_several_stops_wins() -> None:
    out, stopped = run(["world", "lo w"], ["Hel", "lo world"])
    assert stopped and "".join(out) == "Hel"


def test_stop_at_the_very_start() -> None:
    out, stopped = run(["Hi"], ["H", "i there"])
    assert stopped and "".join(out) == ""


def test_no_stops_passes_through() -> None:
    matcher = StopStringMatcher([])
    assert matcher.feed("abc") == ReleasedText("abc", False)
    assert matcher.flush() == ""


def test_after_a_match_input_is_ignored() -> None:
    matcher = StopStringMatcher(["x"])
    assert matcher.feed("axb") == ReleasedText("a", True)
    assert matcher.matched == "x"
    assert matcher.feed("more") == ReleasedText("", True)
    assert matcher.flush() == ""


def test_overlapping_prefixes() -> None:
    # "aab" must be found although "aa" looked like a start of "aab" one character early.
    out, stopped = run(["aab"], ["a", "a", "a", "b", "c"])
    assert stopped and "".join(out) == "a"


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="ab<>E", max_size=30),
    stops=st.lists(st.text(alphabet="ab<>E", min_size=1, max_size=4), min_size=1, max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=30), max_size=6),
)
def test_streaming_stops_as_soon_as_the_text_so_far_holds_a_stop(text: str, stops: list[str], cuts: list[int]) -> None:
    # Generation stops after the first piece whose arrival completes a stop string; the
    # output is cut where the earliest stop string in the text so far begins.
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    chunks = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    out, stopped = run(stops, chunks)
    for end in bounds[1:]:
        positions = [text[:end].find(s) for s in stops if s in text[:end]]
        if positions:
            assert stopped and "".join(out) == text[: min(positions)]
            return
    assert not stopped and "".join(out) == text


# ---- as the TGI adapter uses it: every piece fed, then flush at the choice's end ----


def feed_all(pieces: list[str], stops: list[str]) -> list[str]:
    matcher = StopStringMatcher(stops)
    out = [matcher.feed(p).text for p in pieces]
    out.append(matcher.flush())
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
def test_every_split_gives_the_same_text_and_never_leaks(text: str, stops: list[str], expected: str) -> None:
    for cuts in itertools.combinations(range(1, len(text)), 2):
        pieces = [text[i:j] for i, j in zip((0, *cuts), (*cuts, len(text)))]
        out = feed_all(pieces, stops)
        assert "".join(out) == expected, pieces
        released = ""
        for piece in out[:-1]:
            released += piece
            assert not any(s in released for s in stops)


def test_nothing_after_the_stop() -> None:
    matcher = StopStringMatcher(["x"])
    assert matcher.feed("ax").text == "a"
    assert matcher.feed("more").text == "" and matcher.flush() == ""


def test_importing_the_matcher_needs_neither_torch_nor_the_tokenizer_libraries() -> None:
    # The TGI adapter uses it in the gateway process, whose pod has none of them.
    code = (
        "import sys, engine.text.stop; "
        "heavy = {'torch', 'tokenizers', 'jinja2'} & set(sys.modules); assert not heavy, heavy"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
