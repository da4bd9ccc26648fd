"""One choice of a native-engine generation, from the engine's token ids to the
contract's events: detokenized text, stop strings held back and cut, tool-call
markup parsed into tool calls, logprobs attached, one Finish in the enum."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, cast

from adapters.base import (
    Event,
    Finish,
    FinishReason,
    GenerationRequest,
    LogprobsDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
)
from adapters.errors import upstream_failed
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.hermes_format import ContentPiece, ToolCallPiece
from engine.text.stop import StopStringMatcher
from engine.text.tokenizer import TextTokenizer
from engine.text.tool_call_stage import ToolCallStage

logger = logging.getLogger(__name__)


@dataclass
class ChoiceEvents:
    """One choice's way from token ids to events."""

    index: int
    tokenizer: TextTokenizer
    stop: list[str]
    stop_token_ids: list[int]
    eos_token_ids: set[int]
    tools: ToolCallStage | None
    request_id: str = ""
    num_tokens: int = 0
    done: bool = False
    detok: IncrementalDetokenizer = field(init=False)
    matcher: StopStringMatcher = field(init=False)

    def __post_init__(self) -> None:
        self.detok = IncrementalDetokenizer(self.tokenizer)
        self.matcher = StopStringMatcher(self.stop)

    def step(self, out: Any, want_logprobs: bool) -> list[Event]:
        """Events for one engine output of this choice."""
        self.num_tokens += len(out.token_ids)
        text_ids = out.token_ids
        if (
            out.finished
            and out.finish_reason == "stop"
            and text_ids
            and (text_ids[-1] in self.stop_token_ids or text_ids[-1] in self.eos_token_ids)
        ):
            text_ids = text_ids[:-1]  # the token that stopped generation is not text (vLLM alike)
        text = self.detok.add(text_ids)
        if out.finished:
            text += self.detok.flush()
        released = self.matcher.feed(text)
        visible, stopped = released.text, released.stopped
        finishing = out.finished or stopped
        if finishing and not stopped:
            visible += self.matcher.flush()

        events: list[Event] = []
        reason = "stop" if stopped else out.finish_reason
        if self.tools is None:
            if visible:
                events.append(TextDelta(self.index, visible))
        else:
            tool_step = self.tools.step(visible, finishing=finishing, reason=reason)
            finishing, reason = tool_step.finishing, tool_step.reason
            for dropped in tool_step.dropped:
                logger.warning(
                    "request %s: dropped a malformed tool call (%s): %.300r",
                    self.request_id,
                    dropped.reason,
                    dropped.text,
                )
            events += [self._tool_event(piece) for piece in tool_step.pieces]

        if want_logprobs and out.logprobs:
            self._attach_logprobs(events, out)
        if finishing:
            self.done = True
            events.append(Finish(self.index, _finish_reason(reason, self.request_id)))
        return events

    def _tool_event(self, piece: ContentPiece | ToolCallPiece) -> Event:
        if isinstance(piece, ContentPiece):
            return TextDelta(self.index, piece.text)
        # No id: the gateway gives every tool call its own.
        return ToolCallDelta(self.index, piece.tool_index, id=None, name=piece.name, arguments=piece.arguments)

    def _attach_logprobs(self, events: list[Event], out: Any) -> None:
        tok = self.tokenizer
        logprobs = []
        for token_id, (chosen, top) in zip(out.token_ids, out.logprobs):
            logprobs.append(
                TokenLogprob(
                    token=tok.token_text(token_id),
                    logprob=chosen,
                    bytes=list(tok.token_bytes(token_id)),
                    top=[
                        TopLogprob(token=tok.token_text(t), logprob=lp, bytes=list(tok.token_bytes(t))) for t, lp in top
                    ],
                )
            )
        first_text = next((e for e in events if isinstance(e, TextDelta)), None)
        if first_text is not None:
            first_text.logprobs = logprobs
        else:
            events.insert(0, LogprobsDelta(self.index, logprobs))


def tool_stage(request: GenerationRequest, forced: bool) -> ToolCallStage | None:
    """A choice's tool-call stage: none without tools or with tool_choice "none"."""
    if not request.tools or request.tool_choice == "none":
        return None
    names = {name for name in map(_tool_name, request.tools) if name is not None}
    return ToolCallStage(forced=forced, tool_names=names, parallel_tool_calls=request.parallel_tool_calls)


def _tool_name(tool: dict) -> str | None:
    fn = tool.get("function") if isinstance(tool, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None


def _finish_reason(reason: str | None, request_id: str) -> FinishReason:
    """The engine finishes a sequence on stop or length (abort is raised before this);
    anything else is a defect, answered as an upstream failure rather than passed off
    as a normal stop."""
    if reason in ("stop", "length", "tool_calls"):
        return cast(FinishReason, reason)
    raise upstream_failed(
        "native", "the engine ended the generation unexpectedly", internal=f"finish reason {reason!r} on {request_id}"
    )
