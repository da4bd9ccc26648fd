"""Stop strings over streamed text.

A stop string may arrive split across tokens, so text that could still be the
start of a stop string is held back until it either completes the match (then it
is dropped together with everything after it) or stops being a possible match
(then it is released). The text returned never contains the stop string.
"""

from __future__ import annotations


class StopStringMatcher:
    """Feed text pieces in order; get back the text that is safe to show."""

    def __init__(self, stop: list[str]) -> None:
        self.stop = [s for s in dict.fromkeys(stop) if s]
        self._held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> tuple[str, bool]:
        """(text to emit, whether a stop string matched). After a match, further input is ignored."""
        if self.matched is not None:
            return "", True
        if not self.stop:
            return text, False
        buffer = self._held + text
        first_pos, first_stop = -1, None
        for s in self.stop:
            pos = buffer.find(s)
            if pos != -1 and (first_pos == -1 or pos < first_pos):
                first_pos, first_stop = pos, s
        if first_stop is not None:
            self.matched = first_stop
            self._held = ""
            return buffer[:first_pos], True
        keep = self._partial_suffix_len(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False

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
