"""The raw bytes of a Responses API stream, judged strictly (the Responses twin of
conformance/sse.py; it shares no leniency with the official client).

A Responses stream is typed server-sent events: each event is an `event: <type>`
line, one `data: <json object>` line whose `type` is the same, and a blank line;
there is no `[DONE]` (the terminal event ends the stream). Rules, each under a
stable name:

  framing      every line is `event: `, `data: `, a `:` comment or blank; one of
               each per event; the last event is terminated
  json         every data is a JSON object with a string `type`
  event-type   the `event:` name is the data's `type`
  no-done      no `data: [DONE]`
  sequence     `sequence_number` is 0, 1, 2, ... in order
  order        the event sequence the official client's stream helper accumulates:
               `response.created`, `response.in_progress`, then the items one at a
               time (`output_item.added` for index 0, 1, ... each closed by its
               `output_item.done` before the next opens; a message's
               `content_part.added` before its text deltas, `output_text.done` and
               `content_part.done` before the item's done; a call's arguments
               deltas before `function_call_arguments.done`), and exactly one
               terminal event (`response.completed`, `response.incomplete`, or
               `response.failed`, which an `error` event may precede), last
  same-id      every `response` object in the stream has one id
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
ITEM_EVENTS = (
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
)


@dataclass(slots=True)
class Violation:
    rule: str
    detail: str
    index: int | None = None  # the event it is about

    def __str__(self) -> str:
        return f"{self.rule}" + (f" (event {self.index})" if self.index is not None else "") + f": {self.detail}"


@dataclass(slots=True)
class ResponsesStream:
    events: list[dict[str, Any]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    def rules_broken(self, *rules: str) -> list[Violation]:
        return [v for v in self.violations if v.rule in rules]

    @property
    def kinds(self) -> list[str]:
        return [str(e.get("type")) for e in self.events]

    @property
    def final(self) -> dict[str, Any] | None:
        """The response object of the terminal event, if there is one."""
        for event in reversed(self.events):
            if event.get("type") in TERMINAL and isinstance(event.get("response"), dict):
                return event["response"]
        return None


def parse_responses_stream(body: bytes) -> ResponsesStream:
    out = ResponsesStream()
    text = body.decode("utf-8", errors="replace").replace("\r\n", "\n")
    blocks = text.split("\n\n")
    if blocks and blocks[-1].strip():
        out.violations.append(Violation("framing", "the last event is not followed by a blank line"))
    for block in blocks:
        if not block.strip():
            continue
        _event(out, block)
    _sequence(out)
    _order(out)
    ids = {e["response"].get("id") for e in out.events if isinstance(e.get("response"), dict)}
    if len(ids) > 1:
        out.violations.append(Violation("same-id", f"response objects with {len(ids)} ids: {sorted(map(str, ids))}"))
    return out


def _event(out: ResponsesStream, block: str) -> None:
    index = len(out.events)
    names, datas = [], []
    for line in block.split("\n"):
        if line.startswith(":"):
            continue
        if line.startswith("event: "):
            names.append(line[7:])
        elif line.startswith("data: "):
            datas.append(line[6:])
        else:
            out.violations.append(
                Violation("framing", f"a line that is not `event: ` or `data: `: {line[:80]!r}", index)
            )
    if len(names) != 1 or len(datas) != 1:
        out.violations.append(
            Violation("framing", f"{len(names)} event line(s) and {len(datas)} data line(s), expected one each", index)
        )
        if not datas:
            return
    if datas[0].strip() == "[DONE]":
        out.violations.append(Violation("no-done", "a data: [DONE] event (a Responses stream has none)", index))
        return
    try:
        payload = json.loads(datas[0])
    except ValueError:
        out.violations.append(Violation("json", f"data is not JSON: {datas[0][:120]!r}", index))
        return
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        out.violations.append(Violation("json", f"data is not an object with a string type: {datas[0][:120]!r}", index))
        return
    if names and names[0] != payload["type"]:
        out.violations.append(Violation("event-type", f"event: {names[0]!r} carries type {payload['type']!r}", index))
    out.events.append(payload)


def _sequence(out: ResponsesStream) -> None:
    for i, event in enumerate(out.events):
        if event.get("sequence_number") != i:
            out.violations.append(
                Violation("sequence", f"sequence_number {event.get('sequence_number')!r}, expected {i}", i)
            )
            return


def _order(out: ResponsesStream) -> None:
    kinds = out.kinds
    bad = out.violations.append
    if kinds[:2] != ["response.created", "response.in_progress"]:
        bad(Violation("order", f"the stream starts {kinds[:2]}, expected response.created, response.in_progress"))
    terminals = [i for i, k in enumerate(kinds) if k in TERMINAL]
    if len(terminals) != 1 or terminals[0] != len(kinds) - 1:
        bad(Violation("order", f"terminal events at {terminals} of {len(kinds)}: expected exactly one, last"))
    if "error" in kinds and (kinds[-1] != "response.failed" or kinds.index("error") != len(kinds) - 2):
        bad(Violation("order", "an error event not directly before response.failed", kinds.index("error")))
    open_index: int | None = None
    next_index = 0
    phase = ""  # within the open item: "" -> "part" -> "text_done" -> "part_done"; or "args_done"
    for i, event in enumerate(out.events):
        kind = kinds[i]
        if kind == "response.output_item.added":
            if open_index is not None:
                bad(Violation("order", f"item {event.get('output_index')} opened while item {open_index} is open", i))
            if event.get("output_index") != next_index:
                bad(Violation("order", f"output_index {event.get('output_index')!r}, expected {next_index}", i))
            open_index, next_index, phase = event.get("output_index"), next_index + 1, ""
        elif kind == "response.output_item.done":
            if event.get("output_index") != open_index:
                bad(Violation("order", f"item {event.get('output_index')} done, but the open item is {open_index}", i))
            item = event.get("item") if isinstance(event.get("item"), dict) else {}
            if item.get("type") == "message" and phase != "part_done":
                bad(Violation("order", "a message item done before its content_part.done", i))
            if item.get("type") == "function_call" and phase != "args_done":
                bad(Violation("order", "a function_call item done before function_call_arguments.done", i))
            open_index = None
        elif kind in ITEM_EVENTS:
            if event.get("output_index") != open_index or open_index is None:
                bad(Violation("order", f"{kind} for item {event.get('output_index')!r}, open: {open_index}", i))
            expected = {
                "response.content_part.added": ("",),
                "response.output_text.delta": ("part",),
                "response.output_text.done": ("part",),
                "response.content_part.done": ("text_done",),
                "response.function_call_arguments.delta": ("",),
                "response.function_call_arguments.done": ("",),
            }[kind]
            if phase not in expected:
                bad(Violation("order", f"{kind} out of place (after {phase or 'output_item.added'})", i))
            phase = {
                "response.content_part.added": "part",
                "response.output_text.done": "text_done",
                "response.content_part.done": "part_done",
                "response.function_call_arguments.done": "args_done",
            }.get(kind, phase)
    if open_index is not None and kinds and kinds[-1] != "response.failed":
        bad(Violation("order", f"item {open_index} never done"))
