"""A strict parser for the raw bytes of an OpenAI-style SSE stream.

This is the first oracle: it does not share code or leniency with the official
client. It accepts what OpenAI sends (`data: <json>\\n\\n` events, `: comment`
lines, CRLF line ends, which clients tolerate) and records every rule a stream
breaks, each under a stable rule name so a check can report exactly which one.

Rules (each can fail on its own; see tests/conformance/test_sse.py):
  utf8               the body decodes as UTF-8
  field              every line is `data: ...`, a `:` comment, or `id:`/`retry:`;
                     `event:` is refused (the client then treats data as a
                     non-chat event) as is any other field name
  data-space         `data:` is followed by one space, as OpenAI sends it
  multiline-data     one `data:` line per event (clients join several with \\n)
  unterminated       every event ends with a blank line (else it is never dispatched)
  empty-data         an event's data is not empty
  json               every non-[DONE] payload is valid JSON ...
  json-object        ... and a JSON object
  done-missing       a `data: [DONE]` event is sent
  done-exact         the terminator is exactly `[DONE]`
  after-done         nothing but whitespace follows `[DONE]`
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ALLOWED_FIELDS = {"data", "id", "retry"}


@dataclass(slots=True)
class SSEViolation:
    rule: str
    detail: str
    event_index: int | None = None  # which event (0-based), when it is about one

    def __str__(self) -> str:
        where = f" (event {self.event_index})" if self.event_index is not None else ""
        return f"{self.rule}{where}: {self.detail}"


@dataclass(slots=True)
class SSEEvent:
    data: str
    payload: Any = None  # parsed JSON, or None for [DONE] and unparsable data
    is_done: bool = False


@dataclass(slots=True)
class SSEParse:
    events: list[SSEEvent] = field(default_factory=list)
    violations: list[SSEViolation] = field(default_factory=list)
    comments: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """The JSON object payloads, in order, excluding [DONE]."""
        return [e.payload for e in self.events if isinstance(e.payload, dict)]

    @property
    def done_seen(self) -> bool:
        return any(e.is_done for e in self.events)


def _split_lines(text: str) -> tuple[list[str], bool]:
    """Split on CRLF, CR or LF (as WHATWG and the official client do).
    Returns the lines and whether the text ended with a line terminator."""
    normalized = text.replace("\r\n", "\n").replace("\r", "\n")
    ends_with_newline = normalized.endswith("\n")
    lines = normalized.split("\n")
    if ends_with_newline:
        lines.pop()
    return lines, ends_with_newline


def parse_sse(body: bytes) -> SSEParse:
    result = SSEParse()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        result.violations.append(SSEViolation("utf8", f"body is not UTF-8: {exc}"))
        text = body.decode("utf-8", errors="replace")

    lines, _ = _split_lines(text)
    data_lines: list[str] = []
    event_open = False  # a non-blank, non-comment line has been seen since the last dispatch
    done_index: int | None = None

    def dispatch() -> None:
        nonlocal done_index
        index = len(result.events)
        if done_index is not None:
            result.violations.append(SSEViolation("after-done", "an event follows data: [DONE]", index))
        if len(data_lines) > 1:
            result.violations.append(
                SSEViolation("multiline-data", f"{len(data_lines)} data lines in one event", index)
            )
        data = "\n".join(data_lines)
        event = SSEEvent(data=data)
        if data.strip() == "[DONE]" or data.startswith("[DONE]"):
            event.is_done = True
            if data != "[DONE]":
                result.violations.append(
                    SSEViolation("done-exact", f"terminator is {data!r}, expected '[DONE]'", index)
                )
            done_index = index
        elif not data.strip():
            result.violations.append(SSEViolation("empty-data", "event with empty data", index))
        else:
            try:
                event.payload = json.loads(data)
            except ValueError as exc:
                result.violations.append(SSEViolation("json", f"data is not JSON ({exc}): {data[:120]!r}", index))
            else:
                if not isinstance(event.payload, dict):
                    result.violations.append(
                        SSEViolation(
                            "json-object", f"data is JSON {type(event.payload).__name__}, not an object", index
                        )
                    )
        result.events.append(event)

    for line in lines:
        if line == "":
            if data_lines:
                dispatch()
            data_lines = []
            event_open = False
            continue
        if line.startswith(":"):
            result.comments += 1
            if done_index is not None:
                result.violations.append(SSEViolation("after-done", f"comment after [DONE]: {line[:60]!r}"))
            continue
        event_open = True
        name, sep, value = line.partition(":")
        if not sep:
            name, value = line, ""
        if name not in ALLOWED_FIELDS:
            result.violations.append(
                SSEViolation(
                    "field",
                    f"line with field {name!r} (only data, id, retry are expected): {line[:80]!r}",
                    len(result.events),
                )
            )
            continue
        if name != "data":
            continue
        if not value.startswith(" "):
            result.violations.append(
                SSEViolation("data-space", f"'data:' not followed by a space: {line[:80]!r}", len(result.events))
            )
        else:
            value = value[1:]
        data_lines.append(value)

    if event_open:
        result.violations.append(
            SSEViolation(
                "unterminated",
                "the last event is not followed by a blank line, so it is never dispatched",
                len(result.events),
            )
        )
    if done_index is None:
        result.violations.append(SSEViolation("done-missing", "no data: [DONE] event"))
    return result
