"""Stop strings over streamed text: the one matcher for the native engine and for the
TGI adapter (TGI returns the matched stop sequence; OpenAI's text excludes it).

A stop string may arrive split across pieces, so text that could still be the start
of a stop string is held back until it either completes the match (then it is dropped
together with everything after it) or stops being a possible match (then it is
released). The text released never contains any part of a stop string.

Pure Python on purpose: the gateway process imports it (through adapters/tgi.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReleasedText:
    """What one piece of input released: text safe to show, and whether a stop string matched."""

    text: str
    stopped: bool


class StopStringMatcher:
    """Feed text pieces in order; get back the text that is safe to show."""

    def __init__(self, stop: list[str]) -> None:
        self.stop = [s for s in dict.fromkeys(stop) if s]
        self._held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> ReleasedText:
        """The text released by `text`. After a match, further input is ignored."""
        if self.matched is not None:
            return ReleasedText("", True)
        if not self.stop:
            return ReleasedText(text, False)
        buffer = self._held + text
        first_pos, first_stop = -1, None
        for s in self.stop:
            pos = buffer.find(s)
            if pos != -1 and (first_pos == -1 or pos < first_pos):
                first_pos, first_stop = pos, s
        if first_stop is not None:
            self.matched = first_stop
            self._held = ""
            return ReleasedText(buffer[:first_pos], True)
        keep = self._partial_suffix_len(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return ReleasedText(buffer[: len(buffer) - keep], False)

    def flush(self) -> str:
        """At the end of the sequence: the held text, which no stop string completed."""
        held, self._held = self._held, ""
        return held if self.matched is None else ""

    def _partial_suffix_len(self, buffer: str) -> int:
        """Length of the longest suffix of `buffer` that is a proper prefix of a stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(buffer)), best, -1):
                if buffer.endswith(s[:n]):
                    best = n
                    break
        return best
