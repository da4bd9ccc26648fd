"""Per-request repair of the canonical events a runtime adapter decoded.

Decoding one chunk at a time cannot fix what only the whole stream shows
(RUNTIMES.md section 5, checklist items 6 and 7):

- tool-call ids: TGI sends `"0"` (>= 3.2) or `""` (< 3.2) for every call, SGLang
  and TGI repeat `id`/`name` on argument pieces. Each call gets one id, unique, on
  its first piece; later pieces carry none.
- finish reasons: a choice that made tool calls and stopped finishes `tool_calls`,
  whatever `tool_choice` was (the gateway's one convention, its encoder's too):
  TGI never says `tool_calls`, vLLM says `stop` for a forced named tool, SGLang
  and TRT-LLM say `tool_calls`; a finish may repeat.
- `parallel_tool_calls: false`: TRT-LLM and SGLang do not enforce it, so pieces of
  any call after the first are dropped.
- a choice the runtime never finished (TGI after a streamed tool call) gets its
  Finish when the stream ended cleanly; usage is held so that it stays last.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from adapters.base import ErrorEvent, Event, Finish, GenerationRequest, TextDelta, ToolCallDelta, Usage


def fresh_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def is_placeholder_id(value: str | None) -> bool:
    """Ids that are not unique: missing, empty, or TGI's counter (`"0"`, `"1"`)."""
    return not value or value.isdigit()


class EventRepair:
    """Feed it every event of one request in order; `finish()` at a clean end."""

    def __init__(self, request: GenerationRequest) -> None:
        self.single_tool = not request.parallel_tool_calls
        self.tool_ids: dict[tuple[int, int], str] = {}
        self.named: set[tuple[int, int]] = set()
        self.with_tools: set[int] = set()
        self.started: set[int] = set()
        self.finished: set[int] = set()
        self.failed = False
        self.usage: Usage | None = None

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, ErrorEvent):
            self.failed = True
            return [event]
        if isinstance(event, ToolCallDelta):
            return self._tool_piece(event)
        if isinstance(event, Finish):
            return self._finish(event)
        if isinstance(event, Usage):
            self.usage = event  # held: usage goes after any Finish made up at the end
            return []
        if isinstance(event, TextDelta):
            self.started.add(event.index)
        return [event]

    def _tool_piece(self, piece: ToolCallDelta) -> list[Event]:
        if self.single_tool and piece.tool_index > 0:
            return []
        key = (piece.index, piece.tool_index)
        self.started.add(piece.index)
        self.with_tools.add(piece.index)
        if key not in self.tool_ids:
            self.tool_ids[key] = piece.id if not is_placeholder_id(piece.id) else fresh_tool_call_id()
            piece.id = self.tool_ids[key]
        else:
            piece.id = None
        if piece.name and key not in self.named:
            self.named.add(key)
        else:
            piece.name = None
        return [piece]

    def _finish(self, event: Finish) -> list[Event]:
        if event.index in self.finished:
            return []
        self.finished.add(event.index)
        self.started.add(event.index)
        event.reason = self._reason(event.index, event.reason)  # type: ignore[assignment]
        return [event]

    def _reason(self, index: int, reason: str) -> str:
        if index in self.with_tools and reason in ("stop", "tool_calls"):
            return "tool_calls"
        if reason == "tool_calls":
            return "stop"  # the runtime claimed a tool call but sent none
        return reason

    def finish(self) -> list[Event]:
        """Finish every choice the runtime left open (unless the stream failed), then usage."""
        out: list[Event] = []
        if not self.failed:
            out.extend(self._finish(Finish(i, "stop"))[0] for i in sorted(self.started - self.finished))
        if self.usage is not None:
            out.append(self.usage)
        return out


async def repaired(events: AsyncIterator[Event], repair: EventRepair) -> AsyncIterator[Event]:
    """`events` through `repair`. Closing this iterator closes `events` (and so
    the upstream connection) at once.

    An error event that comes before anything else (TGI reports validation and
    overload inside a 200 stream, SGLang a full queue) is raised instead: nothing
    reached the client yet, so the gateway can still answer with the right HTTP
    status, or fail over when the error is retryable."""
    sent_any = False
    async with contextlib.aclosing(events) as inner:  # type: ignore[type-var]
        async for event in inner:
            for out in repair.feed(event):
                if isinstance(out, ErrorEvent) and not sent_any:
                    raise out.error
                sent_any = True
                yield out
    for out in repair.finish():
        yield out
