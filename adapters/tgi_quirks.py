"""TGI's answers read as OpenAI's: what only the whole answer shows (`TGIQuirks`) and
the pseudo-tools TGI offers for "auto" (choosing `no_tool` means answering in text).
Facts from docs/runtimes.md §4 and `router/src/chat.rs`.
"""

from __future__ import annotations

import json
from typing import Any

from adapters.base import ErrorEvent, Event, Finish, GenerationRequest, TextDelta, ToolCallDelta
from adapters.dialect import EventFilter
from adapters.errors import upstream_failed

# adapters may import engine.text (pure Python, no torch), nothing else of engine/.
from engine.text.stop import StopStringMatcher

# The pseudo-tools TGI adds for "auto": choosing one means "answer in text".
TEXT_TOOLS = {"no_tool": "content", "notify_error": "error"}


def text_tools_to_content(message: dict[str, Any]) -> None:
    """Non-stream tool calls: drop `_name` from object arguments (< 3.2) and turn a
    chosen `no_tool` into the text answer it carries."""
    calls = []
    for call in message["tool_calls"]:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            continue
        args = fn.get("arguments")
        if isinstance(args, dict):
            args = {k: v for k, v in args.items() if k != "_name"}
            fn["arguments"] = args
        if fn.get("name") in TEXT_TOOLS:
            value = _parse_args(args).get(TEXT_TOOLS[fn["name"]], "")
            message["content"] = (message.get("content") or "") + str(value)
            continue
        calls.append(call)
    message["tool_calls"] = calls


def _parse_args(args: Any) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            value = json.loads(args)
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


class TGIQuirks(EventFilter):
    """What only TGI's whole answer shows, for one request:

    - the matched stop sequence is left at the end of the text (OpenAI's text
      excludes it): text that may begin a stop sequence is held back;
    - before 3.2 a streamed tool call comes as pieces that never name their function,
      the raw grammar output: buffered and decoded when the choice finishes;
    - after a streamed tool call TGI may send no finish chunk: a choice that made a
      tool call gets its finish when the stream ends with `[DONE]`; so does, before
      3.2, a choice that answered in text for a chosen `no_tool` (its stream stops at
      the content's closing quote).
    """

    def __init__(self, request: GenerationRequest, backend: str) -> None:
        self.backend = backend
        self.stops = list(request.sampling.stop)
        self.tools_offered = bool(request.tools)
        self.trimmers: dict[int, StopStringMatcher] = {}
        self.unnamed: dict[tuple[int, int], list[str]] = {}  # raw grammar pieces per (choice, call)
        self.named: set[tuple[int, int]] = set()
        self.with_calls: set[int] = set()
        self.answered: set[int] = set()  # choices that got text while tools were offered
        self.finished: set[int] = set()

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, TextDelta):
            if self.tools_offered:
                self.answered.add(event.index)
            if self.stops:
                trimmer = self.trimmers.setdefault(event.index, StopStringMatcher(self.stops))
                event.text = trimmer.feed(event.text).text
                if not event.text and not event.logprobs:
                    return []
            return [event]
        if isinstance(event, ToolCallDelta):
            return self._tool_piece(event)
        if isinstance(event, Finish):
            return self._finish(event)
        return [event]

    def _tool_piece(self, piece: ToolCallDelta) -> list[Event]:
        key = (piece.index, piece.tool_index)
        self.with_calls.add(piece.index)
        if key in self.unnamed or (not piece.name and key not in self.named):
            self.unnamed.setdefault(key, []).append(piece.arguments)
            return []
        self.named.add(key)
        return [piece]

    def _finish(self, event: Finish) -> list[Event]:
        index = event.index
        out: list[Event] = []
        trimmer = self.trimmers.get(index)
        rest = trimmer.flush() if trimmer is not None else ""
        if rest:
            out.append(TextDelta(index, rest))
        out.extend(self._flush(index))
        if out and isinstance(out[-1], ErrorEvent):
            return out
        self.finished.add(index)
        out.append(event)
        return out

    def at_done(self) -> list[Event]:
        out: list[Event] = []
        for index in sorted({i for i, _ in self.unnamed}):
            out.extend(self._flush(index))
            if out and isinstance(out[-1], ErrorEvent):
                return out
        out.extend(Finish(index, "stop") for index in sorted((self.with_calls | self.answered) - self.finished))
        return out

    def _flush(self, index: int) -> list[Event]:
        out: list[Event] = []
        for key in sorted(k for k in self.unnamed if k[0] == index):
            text = "".join(self.unnamed.pop(key))
            decoded = decode_grammar_call(text)
            if decoded is None:
                out.append(
                    ErrorEvent(
                        upstream_failed(
                            self.backend, f"TGI sent a tool call the gateway could not read: {text[:200]!r}"
                        )
                    )
                )
                return out
            name, args = decoded
            if name in TEXT_TOOLS:
                out.append(TextDelta(index, str(args.get(TEXT_TOOLS[name], ""))))
                continue
            out.append(ToolCallDelta(index, key[1], None, name, json.dumps(args, ensure_ascii=False)))
        return out


def decode_grammar_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """TGI's tool grammar output `{"function": {"_name": NAME, ...args}}` -> (NAME, args)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    fn = value.get("function", value)
    if not isinstance(fn, dict) or not isinstance(fn.get("_name"), str):
        return None
    args = {k: v for k, v in fn.items() if k != "_name"}
    return fn["_name"], args
