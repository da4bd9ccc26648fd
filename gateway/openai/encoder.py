"""The one OpenAI encoder: canonical events -> chat.completion(.chunk) / text_completion.

The events it gets obey the stream rules (adapters/base.py), enforced by
gateway/serving/stream_guard.py: one id per tool call on its first piece, one finish per
choice with a reason in the enum, usage last, nothing after an error. The encoder
trusts them and owns the rest of the response's shape, once, whatever runtime
produced the events:
- `role` only in the first delta of a choice, and only once that choice has
  something to say (a token, a tool call or its finish);
- tool-call `id`, `type` and `function.name` only in the first delta for that
  tool index, a `function` object in every tool-call delta, `arguments` a string,
  tool indices dense from 0 per choice;
- choices introduced in index order (the official client's stream helper indexes
  its snapshot by position), so a choice that starts early waits for lower ones;
- the usage chunk last, with `choices: []`, and only when `include_usage`; then every
  other chunk says `"usage": null`, as OpenAI's do;
- `system_fingerprint` on every chunk and whole answer: the serving pool's (a string;
  the spec does not allow null, so without one the key is left out);
- `data: [DONE]` always, also after an error event;
- the same `id`, `created` and `model` on every chunk.
"""

from __future__ import annotations

from typing import Any

import orjson

from adapters.base import (
    ErrorEvent,
    Event,
    Finish,
    LogprobsDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    Usage,
)
from adapters.errors import GatewayError

DONE = b"data: [DONE]\n\n"


def sse(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def sse_error(err: GatewayError) -> bytes:
    return sse(err.to_dict()) + DONE


def usage_dict(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
    return out


def chat_logprobs(items: list[TokenLogprob]) -> list[dict[str, Any]]:
    # Chat's logprob is a required number: -9999.0 is the spec's "very unlikely".
    return [
        {
            "token": t.token,
            "logprob": -9999.0 if t.logprob is None else t.logprob,
            "bytes": t.bytes,
            "top_logprobs": [{"token": a.token, "logprob": a.logprob, "bytes": a.bytes} for a in t.top],
        }
        for t in items
    ]


def completion_logprobs(items: list[TokenLogprob], offset: int) -> tuple[dict[str, Any], int]:
    """Legacy logprobs; `offset` is where this piece's text starts in the choice."""
    offsets = []
    for t in items:
        offsets.append(offset)
        offset += len(t.token)
    return (
        {
            "tokens": [t.token for t in items],
            "token_logprobs": [t.logprob for t in items],
            "top_logprobs": [{a.token: a.logprob for a in t.top} for t in items],
            "text_offset": offsets,
        },
        offset,
    )


class _Choice:
    """One choice's state (a plain class: a dataclass's generated __init__ checks each
    default factory, per choice of every request)."""

    __slots__ = ("finish_reason", "introduced", "logprobs", "text", "text_offset", "tools")

    def __init__(self) -> None:
        self.introduced = False
        self.text: list[str] = []
        self.logprobs: list[TokenLogprob] = []
        # adapter tool index -> [dense index, id, name, argument pieces]
        self.tools: dict[int, list[Any]] = {}
        self.text_offset = 0
        self.finish_reason: str | None = None


class _Base:
    """What the streaming and whole-response encoders share: choice bookkeeping."""

    def __init__(
        self, response_id: str, created: int, model: str, n: int, chat: bool, logprobs: bool, fingerprint: str | None
    ) -> None:
        self.id = response_id
        self.fingerprint = fingerprint
        self.created = created
        self.model = model
        self.n = n
        self.chat = chat
        self.want_logprobs = logprobs
        self.choices: dict[int, _Choice] = {}
        self.usage: Usage | None = None

    def choice(self, index: int) -> _Choice:
        c = self.choices.get(index)
        if c is None:
            c = self.choices[index] = _Choice()
        return c

    def tool_slot(self, c: _Choice, ev: ToolCallDelta) -> tuple[list[Any], bool]:
        slot = c.tools.get(ev.tool_index)
        if slot is None:
            slot = c.tools[ev.tool_index] = [len(c.tools), ev.id, ev.name, []]
            return slot, True
        if slot[2] is None and ev.name:
            slot[2] = ev.name
        return slot, False


class StreamEncoder(_Base):
    """Events -> SSE frames, for chat (`chat.completion.chunk`) or completions."""

    def __init__(
        self,
        response_id: str,
        created: int,
        model: str,
        n: int = 1,
        *,
        chat: bool = True,
        include_usage: bool = False,
        logprobs: bool = False,
        fingerprint: str | None = None,
    ) -> None:
        super().__init__(response_id, created, model, n, chat, logprobs, fingerprint)
        self.include_usage = include_usage
        self.next_new = 0  # the lowest choice index not yet introduced
        self.pending: dict[int, list[Event]] = {}
        self.head = {
            "id": response_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
            **({"system_fingerprint": fingerprint} if fingerprint else {}),
        }
        # OpenAI's chunks carry `usage` (null) whenever the request asked for it. A chunk's
        # bytes are the head's, its one choice, then the tail's: the same bytes as one
        # dict dumped, without building that dict per chunk.
        self._open = b"data: " + orjson.dumps(self.head)[:-1] + b',"choices":['
        self._close = b"]" + (b',"usage":null' if include_usage else b"") + b"}\n\n"
        self.closed = False

    def feed(self, event: Event) -> bytes:
        """The SSE bytes for one event (possibly empty, possibly several frames)."""
        if isinstance(event, Usage):
            self.usage = event
            return b""
        if isinstance(event, ErrorEvent):
            return self.error(event.error)
        index = event.index
        c = self.choices.get(index) or self.choice(index)
        if not c.introduced and index != self.next_new:
            self.pending.setdefault(index, []).append(event)
            return b""
        out = self._frame(index, c, event)
        if not c.introduced and out:  # an event that writes nothing (an empty text) says nothing yet
            c.introduced = True
            self.next_new += 1
            out += self._flush_pending()
        return out

    def _flush_pending(self) -> bytes:
        out = b""
        while self.next_new in self.pending:
            index = self.next_new
            c = self.choice(index)
            for ev in self.pending.pop(index):
                frame = self._frame(index, c, ev)
                out += frame
                if not c.introduced and frame:
                    c.introduced = True
                    self.next_new += 1
        return out

    def _frame(self, index: int, c: _Choice, event: Event) -> bytes:
        # The most frequent event first: a token.
        if isinstance(event, (TextDelta, LogprobsDelta)):
            text = event.text if isinstance(event, TextDelta) else ""
            lps = event.logprobs if self.want_logprobs else None
            if not text and not lps:
                return b""
            if self.chat:
                delta: dict[str, Any] = {"content": text}
                if not c.introduced:
                    delta = {"role": "assistant", "content": text}
                choice: dict[str, Any] = {"index": index, "delta": delta}
                if lps:
                    choice["logprobs"] = {"content": chat_logprobs(lps), "refusal": None}
                choice["finish_reason"] = None
                return self._chunk(choice)
            lp = None
            if lps:
                lp, c.text_offset = completion_logprobs(lps, c.text_offset)
            else:
                c.text_offset += len(text)
            return self._chunk({"index": index, "text": text, "logprobs": lp, "finish_reason": None})
        if isinstance(event, Finish):
            if self.chat:
                delta = {} if c.introduced else {"role": "assistant", "content": ""}
                return self._chunk({"index": index, "delta": delta, "finish_reason": event.reason})
            return self._chunk({"index": index, "text": "", "logprobs": None, "finish_reason": event.reason})
        if isinstance(event, ToolCallDelta):
            slot, first = self.tool_slot(c, event)
            call: dict[str, Any] = {"index": slot[0]}
            if first:
                call["id"] = slot[1]
                call["type"] = "function"
                call["function"] = {"name": slot[2] or "", "arguments": event.arguments}
            else:
                call["function"] = {"arguments": event.arguments}
            delta = {"tool_calls": [call]}
            if not c.introduced:
                delta = {"role": "assistant", "content": None, **delta}
            return self._chunk({"index": index, "delta": delta, "finish_reason": None})
        return b""

    def _chunk(self, choice: dict[str, Any]) -> bytes:
        return self._open + orjson.dumps(choice) + self._close

    def error(self, err: GatewayError) -> bytes:
        """A mid-stream failure: the error event, then [DONE]. Nothing follows."""
        if self.closed:
            return b""
        self.closed = True
        return self._flush_all_pending() + sse_error(err)

    def _flush_all_pending(self) -> bytes:
        out = b""
        for index in sorted(self.pending):
            c = self.choice(index)
            for ev in self.pending[index]:
                frame = self._frame(index, c, ev)
                out += frame
                c.introduced = c.introduced or bool(frame)  # the role in its first delta only
        self.pending.clear()
        return out

    def close(self) -> bytes:
        """The end of a complete stream: the usage chunk when asked, then [DONE]."""
        if self.closed:
            return b""
        self.closed = True
        out = self._flush_all_pending()
        if self.include_usage and self.usage is not None:
            out += sse({**self.head, "choices": [], "usage": usage_dict(self.usage)})
        return out + DONE


class ResponseBuilder(_Base):
    """Events -> one `chat.completion` or `text_completion` object."""

    def __init__(
        self,
        response_id: str,
        created: int,
        model: str,
        n: int = 1,
        *,
        chat: bool = True,
        logprobs: bool = False,
        fingerprint: str | None = None,
    ) -> None:
        super().__init__(response_id, created, model, n, chat, logprobs, fingerprint)

    def feed(self, event: Event) -> None:
        # The most frequent first: an answer is texts, a finish per choice, one usage.
        if isinstance(event, TextDelta):
            c = self.choices.get(event.index) or self.choice(event.index)
            c.text.append(event.text)
            if event.logprobs:
                c.logprobs.extend(event.logprobs)
        elif isinstance(event, Finish):
            (self.choices.get(event.index) or self.choice(event.index)).finish_reason = event.reason
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, ErrorEvent):
            raise event.error
        elif isinstance(event, ToolCallDelta):
            slot, _ = self.tool_slot(self.choices.get(event.index) or self.choice(event.index), event)
            slot[3].append(event.arguments)
        elif isinstance(event, LogprobsDelta):
            (self.choices.get(event.index) or self.choice(event.index)).logprobs.extend(event.logprobs)

    def build(self, usage: Usage) -> dict[str, Any]:
        choices = []
        for index in range(self.n):
            c = self.choice(index)
            reason = c.finish_reason or "stop"
            text = "".join(c.text)
            if self.chat:
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": text or (None if c.tools else ""),
                    "refusal": None,
                }
                if c.tools:
                    message["tool_calls"] = [
                        {
                            "id": slot[1],
                            "type": "function",
                            "function": {"name": slot[2] or "", "arguments": "".join(slot[3])},
                        }
                        for slot in sorted(c.tools.values(), key=lambda s: s[0])
                    ]
                logprobs = {"content": chat_logprobs(c.logprobs), "refusal": None} if self.want_logprobs else None
                choices.append({"index": index, "message": message, "logprobs": logprobs, "finish_reason": reason})
            else:
                logprobs = completion_logprobs(c.logprobs, 0)[0] if self.want_logprobs else None
                choices.append({"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason})
        return {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            **({"system_fingerprint": self.fingerprint} if self.fingerprint else {}),
            "choices": choices,
            "usage": usage_dict(usage),
        }
