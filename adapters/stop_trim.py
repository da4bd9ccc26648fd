"""Cutting stop strings out of a runtime's text, for runtimes that return the
matched stop sequence (TGI keeps it: `StopSequenceCriteria`), while streaming.

OpenAI's rule is that the returned text excludes the stop sequence, and a stream
must not leak even a part of it: text that could be the start of a stop string
is held back until it is clear whether the match completes.
"""

from __future__ import annotations


class StopTrimmer:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """The part of the text so far that can be released now."""
        if self.stopped:
            return ""
        self.pending += text
        cut = self._first_match()
        if cut is not None:
            self.stopped = True
            out, self.pending = self.pending[:cut], ""
            return out
        keep = self._held_suffix()
        out = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(self.pending) - keep :]
        return out

    def flush(self) -> str:
        """At the end of the choice: release what was held (it never matched)."""
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out

    def _first_match(self) -> int | None:
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        return min(hits) if hits else None

    def _held_suffix(self) -> int:
        """Length of the longest suffix of `pending` that begins some stop string."""
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), best, -1):
                if self.pending.endswith(s[:k]):
                    best = k
                    break
        return best
