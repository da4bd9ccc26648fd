"""The Responses encoder: canonical events -> a `response` object or its event stream.

The twin of `gateway/openai/encoder.py` for `/v1/responses`, fed the same events:
- `ResponseAssembly` decides the answer: the output items (`OutputState`), the
  status (`completed`; `incomplete` with reason `max_output_tokens` on a
  `length` finish, `content_filter` on a filtered one; `failed` on an
  `ErrorEvent`, a backend that broke the contract, or any failure the caller
  reports), and the usage.
- `ResponseStreamEncoder` frames the same decisions as server-sent events:
  `event: <type>` and `data: <json>` per event, `sequence_number` from 0 and
  always increasing, `response.created` and `response.in_progress` first, the
  item events in order, and exactly one terminal event (`response.completed`,
  `response.incomplete`, or `error` then `response.failed`). No `[DONE]`: the
  terminal event ends a Responses stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from adapters.base import ErrorEvent, Event
from adapters.errors import GatewayError
from gateway.openai.responses.output import OutputState
from gateway.openai.responses.response_object import ResponseShell

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


class ResponseAssembly:
    """Events -> the final `response` object (the whole answer; the stream's core)."""

    def __init__(self, shell: ResponseShell, *, logprobs: bool, clock: Callable[[], float] = time.time) -> None:
        self.shell = shell
        self.state = OutputState(logprobs=logprobs)
        self.error: GatewayError | None = None
        self.clock = clock

    @property
    def failed(self) -> bool:
        return self.error is not None

    def feed(self, event: Event) -> list[dict[str, Any]]:
        """The item events `event` causes; a failure is recorded, never raised."""
        if self.error is not None:
            return []
        if isinstance(event, ErrorEvent):
            self.fail(event.error)
            return []
        try:
            return self.state.feed(event)
        except GatewayError as err:
            self.fail(err)
            return []

    def fail(self, err: GatewayError) -> None:
        """Record a failure (the first one wins: it is the cause of the rest)."""
        if self.error is None:
            self.error = err
            self.state.abandon()

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        if self.state.finish_reason in INCOMPLETE_REASONS:
            return "incomplete"
        return "completed" if self.state.finished else "in_progress"

    def result(self) -> dict[str, Any]:
        """The response object as it stands (final once the events ended)."""
        return self.shell.build(*self._result())

    def result_json(self, output: orjson.Fragment | None = None) -> bytes:
        """`result()` serialized (`orjson.dumps(result())`, without building it);
        `output`: the output items already serialized, if they are."""
        return self.shell.build_json(*self._result(output))

    def _result(self, output: Any = None) -> tuple[Any, ...]:
        status = self.status
        incomplete = INCOMPLETE_REASONS.get(self.state.finish_reason or "") if status == "incomplete" else None
        completed_at = int(self.clock()) if status == "completed" else None
        output = self.state.output() if output is None else output
        return status, output, self.state.usage, self.error, incomplete, completed_at


class ResponseStreamEncoder:
    """Events -> Responses server-sent events."""

    def __init__(self, assembly: ResponseAssembly) -> None:
        self.assembly = assembly
        self.sequence = 0
        self._delta_index = -1  # the output index `_delta_head` was built for
        # A message closed from a template (at the finish: nothing follows it), as
        # `output_item.done` serialized it: the terminal object's whole output when
        # it is the only item.
        self._done_message: tuple[int, bytes] | None = None
        self._delta_head = b""

    def start(self) -> bytes:
        # One serialization of the response object for both frames (it is the
        # biggest part of them), spliced as orjson would write the whole event.
        created = self.assembly.shell.build_json("in_progress", [], None)
        return self._spliced("response.created", created) + self._spliced("response.in_progress", created)

    def feed(self, event: Event) -> bytes:
        payloads = self.assembly.feed(event)
        if len(payloads) == 1:
            return self._frame(payloads[0])
        return b"".join([self._frame(p) for p in payloads])

    def text_delta(self, output_index: int, text: str) -> bytes:
        """`response.output_text.delta` for text the assembly already took
        (`OutputState.more_text`), for the message at `output_index`: the frame before
        the delta is built once per item, only the delta and the sequence number per
        event; the bytes are `_frame`'s (pinned by tests/gateway/openai/responses/test_wire_golden.py)."""
        if output_index != self._delta_index:
            item_id = self.assembly.state.items[output_index].id
            self._delta_head = (
                b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":'
                + orjson.dumps(item_id)
                + b',"output_index":%d,"content_index":0,"delta":' % output_index
            )
            self._delta_index = output_index
        sequence = self.sequence
        self.sequence = sequence + 1
        return self._delta_head + orjson.dumps(text) + b',"logprobs":[],"sequence_number":%d}\n\n' % sequence

    def message_opened(self, output_index: int, text: str) -> bytes:
        """What `feed` writes for text that opens a message (`output_item.added`,
        `content_part.added`, the first delta), for the message the state opened
        quietly (`OutputState.take_text`) at `output_index`; without logprobs."""
        item_id = orjson.dumps(self.assembly.state.items[output_index].id)
        sequence = self.sequence
        self.sequence = sequence + 2
        return (
            _MESSAGE_OPENED % (output_index, item_id, sequence, item_id, output_index, sequence + 1)
        ) + self.text_delta(output_index, text)

    def message_closed(self, output_index: int) -> bytes:
        """What `feed` writes for the finish that closes the message at `output_index`
        (`output_text.done`, `content_part.done`, `output_item.done`), once the state
        closed it quietly (`OutputState.finish_quietly`); without logprobs."""
        item = self.assembly.state.items[output_index]
        item_id = orjson.dumps(item.id)
        text = orjson.dumps("".join(item.text))  # type: ignore[union-attr]  # a message
        part = b'{"type":"output_text","text":%s,"annotations":[],"logprobs":[]}' % text
        done = b'{"id":%s,"type":"message","status":"%s","role":"assistant","content":[%s]}' % (
            item_id,
            item.status.encode(),
            part,
        )
        self._done_message = (output_index, done)  # a closed item never changes
        sequence = self.sequence
        self.sequence = sequence + 3
        return _MESSAGE_CLOSED % (
            *(item_id, output_index, text, sequence),
            *(item_id, output_index, part, sequence + 1),
            *(output_index, done, sequence + 2),
        )

    def terminal(self, final: dict[str, Any] | None = None) -> bytes:
        """The last events, for `final` (the assembly's `result()`, as stored); None:
        the assembly's result as it stands (nothing was stored: it is never built)."""
        if final is None:
            done, output = self._done_message, None  # None: built from the state
            if done is not None and done[0] == 0 and len(self.assembly.state.items) == 1:
                output = orjson.Fragment(b"[" + done[1] + b"]")
            response = self.assembly.result_json(output)
        else:
            response = orjson.dumps(final)
        err = self.assembly.error
        if err is not None:
            error_event = {"type": "error", "code": err.code or err.type, "message": err.message, "param": err.param}
            return self._frame(error_event) + self._spliced("response.failed", response)
        kind = "response.incomplete" if self.assembly.status == "incomplete" else "response.completed"
        return self._spliced(kind, response)

    def _spliced(self, kind: str, response: bytes) -> bytes:
        """The frame `_frame` writes for `{"type": kind, "response": <response>}`, from
        the response object already serialized (`kind` is one of ours: plain ASCII)."""
        sequence = self.sequence
        self.sequence = sequence + 1
        return b'event: %s\ndata: {"type":"%s","response":%s,"sequence_number":%d}\n\n' % (
            kind.encode(),
            kind.encode(),
            response,
            sequence,
        )

    def _frame(self, payload: dict[str, Any]) -> bytes:
        payload["sequence_number"] = self.sequence
        self.sequence += 1
        kind = payload["type"]
        head = _HEADS.get(kind) or _HEADS.setdefault(kind, b"event: " + kind.encode() + b"\ndata: ")
        return head + orjson.dumps(payload) + b"\n\n"


_HEADS: dict[str, bytes] = {}

# The frames around a message without logprobs, as `_frame` writes them (key order
# included; pinned by tests/gateway/openai/responses/test_fast_paths.py).
_MESSAGE_OPENED = (
    b"event: response.output_item.added\ndata: "
    b'{"type":"response.output_item.added","output_index":%d,"item":{"id":%s,"type":"message",'
    b'"status":"in_progress","role":"assistant","content":[]},"sequence_number":%d}\n\n'
    b"event: response.content_part.added\ndata: "
    b'{"type":"response.content_part.added","item_id":%s,"output_index":%d,"content_index":0,'
    b'"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]},"sequence_number":%d}\n\n'
)
_MESSAGE_CLOSED = (
    b"event: response.output_text.done\ndata: "
    b'{"type":"response.output_text.done","item_id":%s,"output_index":%d,"content_index":0,'
    b'"text":%s,"logprobs":[],"sequence_number":%d}\n\n'
    b"event: response.content_part.done\ndata: "
    b'{"type":"response.content_part.done","item_id":%s,"output_index":%d,"content_index":0,'
    b'"part":%s,"sequence_number":%d}\n\n'
    b"event: response.output_item.done\ndata: "
    b'{"type":"response.output_item.done","output_index":%d,"item":%s,"sequence_number":%d}\n\n'
)  # event type -> its `event:` line and the start of its `data:` line
