"""Canonical events -> Responses output items, and the stream events that build them.

`OutputState` is the one place that decides the output: the streaming encoder
frames the event payloads it returns, the whole-response builder ignores them
and reads the items, so both answers always agree. Rules:
- only choice 0 exists (a Responses request asks for one answer);
- items come in order and one at a time, as OpenAI sends them: text opens a
  `message` item, a new tool index opens a `function_call` item, and whatever
  was open is done first (`output_item.done` before the next `output_item.added`);
- a function call is announced once its name is known (runtimes may send the
  name after the first argument piece); its argument pieces wait until then;
- at the finish every open item is done; on `length` or `content_filter` the
  item that was cut is `incomplete`, everything else `completed`;
- nothing follows the finish (the canonical contract: one finish per choice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

from adapters.base import Event, Finish, LogprobsDelta, TextDelta, TokenLogprob, ToolCallDelta, Usage
from adapters.errors import GatewayError
from gateway.openai.responses.ids import new_function_call_id, new_message_id

CUT = ("length", "content_filter")  # finishes that leave the item they cut `incomplete`


@dataclass(slots=True)
class _Message:
    id: str
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    status: str = "in_progress"


@dataclass(slots=True)
class _Call:
    id: str
    call_id: str
    name: str | None
    arguments: list[str] = field(default_factory=list)
    announced: bool = False
    status: str = "in_progress"


class OutputState:
    def __init__(self, *, logprobs: bool) -> None:
        self.want_logprobs = logprobs
        self.items: list[_Message | _Call] = []
        self.calls: dict[int, int] = {}  # adapter tool index -> output index
        self.open: int | None = None  # output index of the item still receiving deltas
        # The open item's text pieces when it is a message, else None: more text for it
        # is the common event, taken with one lookup (`more_text`). Set with `open`, by `_open`.
        self.open_text: list[str] | None = None
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def more_text(self, event: Event) -> TypeGuard[TextDelta]:
        """Take `event` when it is more text for the open message and nothing else
        follows from it (no item opens, no logprobs): the whole answer's common case,
        which needs no event payload. False: `feed` it."""
        texts = self.open_text  # None also once finished: the finish closes the open item
        if texts is None or type(event) is not TextDelta or event.index != 0 or not event.text:
            return False
        if self.want_logprobs and event.logprobs:
            return False
        texts.append(event.text)
        return True

    def take_text(self, event: Event) -> TypeGuard[TextDelta]:
        """`more_text`, and also the text that opens a message when no item is open:
        for a whole answer, which reads only the items (the events that open an item
        are not built). False: `feed` it."""
        if self.more_text(event):
            return True
        if type(event) is not TextDelta or self.open is not None or event.index != 0 or not event.text:
            return False
        if self.finish_reason is not None or (self.want_logprobs and event.logprobs):
            return False
        self.items.append(_Message(new_message_id(), [event.text]))  # what `_text` opens, nothing to close
        self._open(len(self.items) - 1)
        return True

    def feed(self, event: Event) -> list[dict[str, Any]]:
        """The stream events (without sequence numbers) that `event` causes."""
        if type(event) is TextDelta and event.index == 0 and self.finish_reason is None:
            return self._text(event.text, event.logprobs)  # the common event first (a measured path)
        if isinstance(event, Usage):
            self.usage = event
            return []
        if self.finished or getattr(event, "index", 0) != 0:
            return []
        if isinstance(event, TextDelta):
            return self._text(event.text, event.logprobs)
        if isinstance(event, LogprobsDelta):
            return self._text("", event.logprobs)
        if isinstance(event, ToolCallDelta):
            return self._tool_call(event)
        if isinstance(event, Finish):
            self.finish_reason = event.reason
            return self._close(incomplete=event.reason in CUT)
        return []

    def finish_quietly(self, event: Finish) -> bool:
        """Take `event` as `feed` would, without building the stream events it causes
        (a whole answer reads only the items). False: it is not this choice's finish
        (or nothing can finish any more): `feed` it."""
        if event.index != 0 or self.finish_reason is not None:
            return False
        self.finish_reason = event.reason
        if self.open is not None:
            # What `_close` leaves in the items: the status; a call never announced
            # shows its name as "" either way (`item`).
            self.items[self.open].status = "incomplete" if event.reason in CUT else "completed"
            self._open(None)
        return True

    def _open(self, index: int | None) -> None:
        self.open = index
        item = self.items[index] if index is not None else None
        self.open_text = item.text if type(item) is _Message else None

    # ---- text -------------------------------------------------------------------

    def _text(self, text: str, logprobs: list[TokenLogprob] | None) -> list[dict[str, Any]]:
        index = self.open
        if index is not None and text and not (self.want_logprobs and logprobs):
            current = self.items[index]
            if type(current) is _Message:  # more text for the open message: one delta, nothing else
                current.text.append(text)
                return [
                    {
                        "type": "response.output_text.delta",
                        "item_id": current.id,
                        "output_index": index,
                        "content_index": 0,
                        "delta": text,
                        "logprobs": [],
                    }
                ]
        lps = _delta_logprobs(logprobs) if self.want_logprobs and logprobs else []
        if not text and not lps:
            return []
        out: list[dict[str, Any]] = []
        index = self.open
        item = self.items[index] if index is not None else None
        if index is None or not isinstance(item, _Message):
            out += self._close()
            item = _Message(new_message_id())
            self.items.append(item)
            index = len(self.items) - 1
            self._open(index)
            out.append(self._added(index))
            out.append(self._part_event("response.content_part.added", index, {**_text_part(""), "logprobs": []}))
        item.text.append(text)
        if lps:
            item.logprobs += _part_logprobs(logprobs or [])
        out.append(self._content_event("response.output_text.delta", index, delta=text, logprobs=lps))
        return out

    # ---- function calls ------------------------------------------------------------

    def _tool_call(self, ev: ToolCallDelta) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        index = self.calls.get(ev.tool_index)
        if index is None:
            out += self._close()
            self.items.append(_Call(new_function_call_id(), ev.id or "", ev.name or None))
            index = self.calls[ev.tool_index] = len(self.items) - 1
            self._open(index)
        elif index != self.open:
            # The call is already done (its arguments were final): a runtime that
            # interleaves calls cannot be told in this API's one-item-at-a-time order.
            raise GatewayError(
                502, f"The backend sent more of tool call {ev.tool_index} after it had ended.", code="upstream_error"
            )
        call = self.items[index]
        assert isinstance(call, _Call)
        if call.name is None and ev.name:
            call.name = ev.name
        call.arguments.append(ev.arguments)
        if not call.announced and call.name is not None:
            out += self._announce(index, call)
        elif call.announced and ev.arguments:
            out.append(self._arguments_delta(index, call, ev.arguments))
        return out

    def _announce(self, index: int, call: _Call) -> list[dict[str, Any]]:
        call.announced = True
        out = [self._added(index)]
        pending = "".join(call.arguments)
        if pending:
            out.append(self._arguments_delta(index, call, pending))
        return out

    def _arguments_delta(self, index: int, call: _Call, delta: str) -> dict[str, Any]:
        return {
            "type": "response.function_call_arguments.delta",
            "item_id": call.id,
            "output_index": index,
            "delta": delta,
        }

    # ---- closing items ------------------------------------------------------------------

    def _close(self, *, incomplete: bool = False) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        index = self.open
        self._open(None)
        item = self.items[index]
        item.status = "incomplete" if incomplete else "completed"
        out: list[dict[str, Any]] = []
        if isinstance(item, _Message):
            text = "".join(item.text)
            out.append(self._content_event("response.output_text.done", index, text=text, logprobs=item.logprobs))
            out.append(self._part_event("response.content_part.done", index, self._output_part(item)))
        else:
            if not item.announced:
                item.name = item.name or ""
                out += self._announce(index, item)
            out.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item.id,
                    "output_index": index,
                    "name": item.name,
                    "arguments": "".join(item.arguments),
                }
            )
        out.append({"type": "response.output_item.done", "output_index": index, "item": self.item(index)})
        return out

    # ---- items and event payloads ---------------------------------------------------------

    def item(self, index: int, *, full: bool = True) -> dict[str, Any]:
        """Output item `index`; not `full`: as `output_item.added` shows it (no content yet)."""
        item = self.items[index]
        if isinstance(item, _Message):
            content = [self._output_part(item)] if full else []
            return {"id": item.id, "type": "message", "status": item.status, "role": "assistant", "content": content}
        return {
            "id": item.id,
            "type": "function_call",
            "status": item.status,
            "call_id": item.call_id,
            "name": item.name or "",
            "arguments": "".join(item.arguments) if full else "",
        }

    def output(self) -> list[dict[str, Any]]:
        """Every output item, in order."""
        return [self.item(i) for i in range(len(self.items))]

    def abandon(self) -> None:
        """The generation failed: the item still open stays unfinished (`incomplete`)."""
        if self.open is not None:
            self.items[self.open].status = "incomplete"
            self._open(None)

    def _output_part(self, item: _Message) -> dict[str, Any]:
        part = _text_part("".join(item.text))
        part["logprobs"] = list(item.logprobs)
        return part

    def _added(self, index: int) -> dict[str, Any]:
        return {"type": "response.output_item.added", "output_index": index, "item": self.item(index, full=False)}

    def _part_event(self, kind: str, index: int, part: dict[str, Any]) -> dict[str, Any]:
        item_id = self.items[index].id
        return {"type": kind, "item_id": item_id, "output_index": index, "content_index": 0, "part": part}

    def _content_event(self, kind: str, index: int, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "item_id": self.items[index].id, "output_index": index, "content_index": 0, **fields}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _delta_logprobs(items: list[TokenLogprob]) -> list[dict[str, Any]]:
    # A delta's logprobs carry no bytes; a logprob the runtime did not know is the
    # spec's "very unlikely" (-9999.0), as the chat encoder writes it.
    return [
        {
            "token": t.token,
            "logprob": -9999.0 if t.logprob is None else t.logprob,
            "top_logprobs": [{"token": a.token, "logprob": a.logprob} for a in t.top],
        }
        for t in items
    ]


def _part_logprobs(items: list[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": t.token,
            "bytes": t.bytes if t.bytes is not None else list(t.token.encode()),
            "logprob": -9999.0 if t.logprob is None else t.logprob,
            "top_logprobs": [
                {
                    "token": a.token,
                    "bytes": a.bytes if a.bytes is not None else list(a.token.encode()),
                    "logprob": a.logprob,
                }
                for a in t.top
            ],
        }
        for t in items
    ]
