"""The one owner of the stream rules (adapters/base.py, "The stream rules").

Every request's events pass through one `StreamGuard` on the way out of the
dispatcher, after n > 1 fan-out and the prompts of a batched completion are
merged, so each rule is enforced once, for every adapter, and the encoder trusts
what it gets. The guard runs once per event: a plain class, isinstance checks,
events rewritten in place, nothing allocated for text. Its error messages reach
the tenant, so they never name the backend (the log does).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator

from adapters.base import (
    FINISH_REASONS,
    ErrorEvent,
    Event,
    Finish,
    GenerationRequest,
    LogprobsDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    total_choices,
)
from adapters.errors import THE_BACKEND, GatewayError
from adapters.runtime_errors import mid_stream_failure

log = logging.getLogger("switchyard.stream_guard")


def new_tool_call_id() -> str:
    """The gateway's id for one tool call, whatever the runtime sent (OpenAI's shape)."""
    return "call_" + secrets.token_hex(12)


class StreamGuard:
    """The rules for one request's stream. `feed` every event in order: it returns
    the event to send (possibly rewritten, or an `ErrorEvent` that ends the
    stream), or None to drop it. `end` at a clean end gives the last event."""

    __slots__ = (
        "backend",
        "calls",
        "chat",
        "choices",
        "ended",
        "finished",
        "first_call",
        "named_tool",
        "single_tool",
        "usage",
        "with_calls",
    )

    def __init__(
        self, *, choices: int, chat: bool, parallel_tool_calls: bool, backend: str, named_tool: bool = False
    ) -> None:
        self.choices = choices
        self.chat = chat
        self.single_tool = not parallel_tool_calls
        # tool_choice forced one named function: OpenAI finishes such a call `stop`
        self.named_tool = named_tool
        self.backend = backend
        self.finished: set[int] = set()
        # (choice, tool index) -> whether the call's name was sent
        self.calls: dict[tuple[int, int], bool] = {}
        self.with_calls: set[int] = set()  # choices that made a tool call
        # choice -> the tool index of its one call (parallel_tool_calls: false)
        self.first_call: dict[int, int] = {}
        self.usage: Usage | None = None
        self.ended = False

    @classmethod
    def for_requests(cls, requests: list[GenerationRequest], backend: str) -> StreamGuard:
        """The guard for the merged stream of `requests` (the prompts of one request)."""
        first = requests[0]
        return cls(
            choices=total_choices(requests),
            chat=first.kind == "chat",
            parallel_tool_calls=first.parallel_tool_calls,
            backend=backend,
            named_tool=isinstance(first.tool_choice, dict),
        )

    def feed(self, event: Event) -> Event | None:
        if isinstance(event, (TextDelta, LogprobsDelta)):
            return None if event.index in self.finished else event
        if isinstance(event, ToolCallDelta):
            return self._tool_piece(event)
        if isinstance(event, Finish):
            return self._finish(event)
        if isinstance(event, Usage):
            self.usage = event  # held: it goes last, and only after a clean end
            return None
        # An ErrorEvent: nothing may follow it. Every event here comes after the
        # first one (the dispatcher answers an earlier failure), so it is the backend's.
        self.ended = True
        return ErrorEvent(mid_stream_failure(event.error, self.backend))

    def _tool_piece(self, piece: ToolCallDelta) -> ToolCallDelta | None:
        index = piece.index
        if not self.chat or index in self.finished:
            return None  # the legacy API has no tool calls
        if self.single_tool and self.first_call.setdefault(index, piece.tool_index) != piece.tool_index:
            return None
        key = (index, piece.tool_index)
        named = self.calls.get(key)
        if named is None:
            piece.id = new_tool_call_id()
            self.calls[key] = bool(piece.name)
            self.with_calls.add(index)
            return piece
        piece.id = None
        if named or not piece.name:
            piece.name = None
        else:
            self.calls[key] = True
        return piece

    def _finish(self, event: Finish) -> Event | None:
        index = event.index
        if index in self.finished:
            return None
        reason = event.reason
        if reason not in FINISH_REASONS:
            self.ended = True
            log.warning("backend %s ended choice %d with finish_reason %r", self.backend, index, reason)
            return ErrorEvent(
                GatewayError(
                    502,
                    f"{THE_BACKEND} ended choice {index} with finish_reason {reason!r}, "
                    "which is a failure, not an answer.",
                    code="upstream_error",
                )
            )
        self.finished.add(index)
        if reason == "stop" or reason == "tool_calls":
            # A call made and stopped is `tool_calls`, except for a forced named function,
            # which OpenAI finishes `stop`; a runtime that claimed a call but sent none
            # (or the legacy API) stopped.
            calls = index in self.with_calls and not self.named_tool
            event.reason = "tool_calls" if calls else "stop"
        return event

    def end(self) -> Event | None:
        """At a clean end: an `ErrorEvent` naming the choices that never finished, or
        the usage (None when the runtime gave none)."""
        missing = [i for i in range(self.choices) if i not in self.finished]
        if missing:
            log.warning("backend %s ended the stream without finishing choice(s) %s", self.backend, missing)
            return ErrorEvent(
                GatewayError(
                    502, f"{THE_BACKEND} ended the stream without finishing choice(s) {missing}.", code="upstream_error"
                )
            )
        return self.usage


async def guarded(events: AsyncIterator[Event], guard: StreamGuard, first: Event | None = None) -> AsyncIterator[Event]:
    """`first` (an event already read) and then `events`, under `guard`. An error
    event, or closing this iterator, closes `events` at once."""
    try:
        event = first if first is not None else await anext(events, None)
        while event is not None:
            out = guard.feed(event)
            if out is not None:
                yield out
                if guard.ended:
                    return
            event = await anext(events, None)
    except GatewayError as exc:
        yield ErrorEvent(mid_stream_failure(exc, guard.backend))
        return
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    last = guard.end()
    if last is not None:
        yield last
