"""One choice's tool-call stage: its visible text in, content and tool-call pieces out,
and the finish reason the calls imply.

Two readers, chosen by who decides the shape of the text:
- the grammar (`tool_choice` "required" or a named function): ForcedToolCallReader
  reads the text by the grammar's structure, never as free text;
- the model (`tool_choice` "auto"): HermesToolParser, which drops what is not a
  valid call rather than passing on markup or broken calls.

Forced calls beyond the first (`tool_choice` "required" with parallel calls) are held
until they are complete: after one whole call the model may stop, and a further call
that `max_tokens` cuts is never sent (the choice ends `tool_calls` with its whole
calls), so every call after the first reaches the client as valid JSON. The first call
streams as it comes; only `length` can cut it, and the finish reason then says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.text.forced_tool_calls import ForcedToolCallReader, ToolCallFormatError
from engine.text.hermes_format import ContentPiece, DroppedCallPiece, ParsedPiece, ToolCallPiece
from engine.text.tool_parser import HermesToolParser


@dataclass(frozen=True, slots=True)
class ToolStageStep:
    """What one piece of visible text gave, and whether (and why) the choice ends now."""

    pieces: list[ContentPiece | ToolCallPiece]
    dropped: list[DroppedCallPiece]  # not a valid call: for the log, never for the client
    finishing: bool
    reason: str | None


class ToolCallStage:
    def __init__(self, *, forced: bool, tool_names: set[str], parallel_tool_calls: bool) -> None:
        self.reader: ForcedToolCallReader | HermesToolParser = (
            ForcedToolCallReader() if forced else HermesToolParser(tool_names)
        )
        self._parallel = parallel_tool_calls
        self._hold = forced and parallel_tool_calls  # further calls wait to be whole
        self._held: list[ToolCallPiece] = []

    def step(self, visible: str, *, finishing: bool, reason: str | None) -> ToolStageStep:
        """Read `visible`; `finishing`/`reason` say whether the text ends here and why
        (the engine's or the stop-string matcher's reason). Raises ToolCallFormatError
        when forced output leaves the grammar's shape."""
        reader = self.reader
        pieces = reader.feed(visible)
        if not self._parallel and reader.num_closed_calls and not finishing:
            # One call was asked for and it is complete: end the choice here.
            finishing, reason = True, "stop"
        if finishing:
            pieces += reader.finish()
            if isinstance(reader, ForcedToolCallReader) and not reader.complete and reason != "length":
                # The grammar allows a stop token only after a whole call: this is a bug, not an answer.
                raise ToolCallFormatError(f"the output ended inside a tool call (finish reason {reason!r})")
        if self._hold:
            pieces = self._held_back(pieces)
            if finishing and reason == "length" and reader.num_closed_calls:
                # `max_tokens` cut after a whole call: a further call it cut is not sent, and
                # the whole calls are the answer (as if the model had stopped after them).
                self._held = []
                reason = "stop"
        if not self._parallel:
            pieces = [p for p in pieces if not (isinstance(p, ToolCallPiece) and p.tool_index > 0)]
        # `length` stays `length`: the client must know the answer was cut (and a call cut
        # by it has unfinished arguments).
        if reason == "stop" and reader.num_calls:
            reason = "tool_calls"
        return ToolStageStep(
            [p for p in pieces if not isinstance(p, DroppedCallPiece)],
            [p for p in pieces if isinstance(p, DroppedCallPiece)],
            finishing,
            reason,
        )

    def _held_back(self, pieces: list[ParsedPiece]) -> list[ParsedPiece]:
        """`pieces` with those of an open call after the first held until it is closed."""
        out: list[ParsedPiece] = []
        for piece in pieces:
            if isinstance(piece, ToolCallPiece) and piece.tool_index > 0:
                self._held.append(piece)
            else:
                out.append(piece)
        closed = self.reader.num_closed_calls
        if self._held and self._held[0].tool_index < closed:
            out += [p for p in self._held if p.tool_index < closed]
            self._held = [p for p in self._held if p.tool_index >= closed]
        return out
