"""The OpenAI wire as the runtimes speak it: request bodies out, events in (the
functions `OpenAIDialect` and the runtime dialects compose).

Decoding is lenient about what runtimes add and faithful to what they say: the
runtimes' known finish words become the OpenAI enum here, an abort or engine error
is raised as a failure, and an unknown word passes through for the stream guard to
refuse; the rules about the whole stream belong to the guard (adapters/base.py,
"The stream rules").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import orjson

from adapters.base import (
    Event,
    Finish,
    GenerationRequest,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
)
from adapters.errors import THE_BACKEND, GatewayError

log = logging.getLogger("switchyard.upstream")

# The finish-reason words runtimes send for a clean end, in the OpenAI enum. An abort or
# an engine error is no finish: it is raised, and the adapter makes it an error event. A
# word in neither set passes through unchanged, for the stream guard to refuse (502).
FINISH_MAP = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "function_call": "tool_calls",
    "eos_token": "stop",
    "stop_sequence": "stop",
    "repetition": "stop",
    "": "stop",
}
FAILED_FINISH = {"abort", "error", "cancelled"}


def normalize_finish(reason: Any, backend: str) -> str:
    if reason is None:
        raise ValueError("no finish reason")
    r = str(reason)
    if r in FAILED_FINISH:
        log.warning("backend %s ended a generation with finish_reason %r", backend, r)
        raise GatewayError(502, f"{THE_BACKEND} ended the generation with finish_reason {r!r}.", code="upstream_error")
    return FINISH_MAP.get(r, r)


def build_body(req: GenerationRequest, served_model: str | None, *, stream: bool) -> dict[str, Any]:
    """The OpenAI request body for `req` (extras passed through, unset fields omitted)."""
    s = req.sampling
    body: dict[str, Any] = dict(req.extra) if req.extra else {}
    if body:
        # Request ids are the gateway's: a client's `request_id` or `rid` would name its
        # generation upstream, and another tenant's with the same id (vLLM, SGLang).
        body.pop("request_id", None)
        body.pop("rid", None)
    body["model"] = served_model or req.model
    if req.kind == "chat":
        body["messages"] = req.messages
        if req.tools:
            body["tools"] = req.tools
            body["parallel_tool_calls"] = req.parallel_tool_calls
        if req.tool_choice is not None:
            body["tool_choice"] = req.tool_choice
        if s.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = s.top_logprobs
    else:
        body["prompt"] = req.prompt
        if s.logprobs:
            body["logprobs"] = s.top_logprobs
        if req.echo:
            body["echo"] = True
    if req.response_format is not None:
        body["response_format"] = req.response_format
    # Each set one as it is (written out: a loop of getattr costs twice as much per request).
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.top_p is not None:
        body["top_p"] = s.top_p
    if s.presence_penalty is not None:
        body["presence_penalty"] = s.presence_penalty
    if s.frequency_penalty is not None:
        body["frequency_penalty"] = s.frequency_penalty
    if s.seed is not None:
        body["seed"] = s.seed
    if s.top_k is not None:
        body["top_k"] = s.top_k
    if s.min_p is not None:
        body["min_p"] = s.min_p
    if s.repetition_penalty is not None:
        body["repetition_penalty"] = s.repetition_penalty
    if s.logit_bias:
        body["logit_bias"] = {str(k): v for k, v in s.logit_bias.items()}
    if s.n != 1:
        body["n"] = s.n
    if s.stop:
        body["stop"] = list(s.stop)
    if s.stop_token_ids:
        body["stop_token_ids"] = list(s.stop_token_ids)
    if s.max_tokens is not None:
        body["max_tokens"] = s.max_tokens
    if s.min_tokens:
        body["min_tokens"] = s.min_tokens
    if s.ignore_eos:
        body["ignore_eos"] = True
    body["stream"] = stream
    if stream:
        # Always ask for usage: the gateway reconciles quotas with it and strips
        # it from the client's stream unless the client asked.
        body["stream_options"] = {"include_usage": True}
    elif req.extra:
        body.pop("stream_options", None)  # an extra's: a whole answer sends no stream options
    return body


def decode_chat_logprobs(lp: Any) -> list[TokenLogprob] | None:
    if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
        return None
    out = []
    for item in lp["content"]:
        top = [
            TopLogprob(t.get("token", ""), float(t.get("logprob", -9999.0)), t.get("bytes"))
            for t in item.get("top_logprobs") or []
        ]
        out.append(TokenLogprob(item.get("token", ""), float(item.get("logprob", -9999.0)), item.get("bytes"), top))
    return out


def decode_completion_logprobs(lp: Any) -> list[TokenLogprob] | None:
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        return None
    tokens = lp["tokens"]
    values = lp.get("token_logprobs") or [None] * len(tokens)
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    out = []
    for tok, val, top in zip(tokens, values, tops):
        alts = [TopLogprob(t, float(v)) for t, v in (top or {}).items()]
        out.append(TokenLogprob(tok, float(val) if val is not None else None, None, alts))
    return out


def decode_usage(u: Any) -> Usage | None:
    if not isinstance(u, dict):
        return None
    details = u.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    try:
        return Usage(
            int(u.get("prompt_tokens") or 0),
            int(u.get("completion_tokens") or 0),
            int(cached) if cached is not None else None,
        )
    except (TypeError, ValueError):
        return None


def decode_tool_calls(index: int, calls: Any, whole: bool) -> list[ToolCallDelta]:
    """Tool calls of one choice. `whole` for a non-streamed message (no `index` needed)."""
    out = []
    for pos, call in enumerate(calls or []):
        if not isinstance(call, dict):
            continue
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if args is None:
            args = ""
        elif not isinstance(args, str):
            args = orjson.dumps(args).decode()  # some runtimes send an object
        tool_index = pos if whole else int(call.get("index", pos) or 0)
        out.append(
            ToolCallDelta(
                index=index,
                tool_index=tool_index,
                id=call.get("id") or None,
                name=fn.get("name") or None,
                arguments=args,
            )
        )
    return out


def indexed_choices(payload: dict) -> Iterator[tuple[int, dict]]:
    """Each choice of a response or chunk with its index (a runtime that leaves
    `index` out means the choice's position)."""
    for pos, choice in enumerate(payload.get("choices") or []):
        yield int(choice.get("index", pos)), choice


def trailing_usage(payload: dict) -> list[Usage]:
    """The usage a response or chunk ends with, if it carries a readable one."""
    usage = decode_usage(payload.get("usage"))
    return [] if usage is None else [usage]


def decode_response(payload: dict, chat: bool, backend: str) -> list[Event]:
    """A non-streamed response as the events a stream of it would have given."""
    events: list[Event] = []
    for index, choice in indexed_choices(payload):
        if chat:  # absent fields skipped before any decoder is called, as decode_chunk does
            msg = choice.get("message") or {}
            content = msg.get("content")
            if content:
                lp = choice.get("logprobs")
                events.append(TextDelta(index, content, decode_chat_logprobs(lp) if lp else None))
            calls = msg.get("tool_calls")
            if calls:
                events.extend(decode_tool_calls(index, calls, whole=True))
        else:
            text = choice.get("text") or ""
            if text:
                events.append(TextDelta(index, text, decode_completion_logprobs(choice.get("logprobs"))))
        reason = normalize_finish(choice.get("finish_reason") or "stop", backend)
        events.append(Finish(index, reason))  # type: ignore[arg-type]
    events.extend(trailing_usage(payload))
    return events


def decode_chunk(payload: dict, chat: bool, backend: str) -> list[Event]:
    """One streamed chunk as events (role-only and empty deltas give none). Once per
    streamed token: absent fields are skipped before any decoder is called."""
    events: list[Event] = []
    for pos, choice in enumerate(payload.get("choices") or ()):
        index = int(choice.get("index", pos))
        lp = choice.get("logprobs")
        if chat:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            logprobs = decode_chat_logprobs(lp) if lp else None
            if content or logprobs:
                events.append(TextDelta(index, content or "", logprobs))
            calls = delta.get("tool_calls")
            if calls:
                events.extend(decode_tool_calls(index, calls, whole=False))
        else:
            text = choice.get("text")
            logprobs = decode_completion_logprobs(lp) if lp else None
            if text or logprobs:
                events.append(TextDelta(index, text or "", logprobs))
        reason = choice.get("finish_reason")
        if reason is not None:
            events.append(Finish(index, normalize_finish(reason, backend)))  # type: ignore[arg-type]
    if payload.get("usage") is not None:
        events.extend(trailing_usage(payload))
    return events


class SSEData:
    """The `data` of each server-sent event (multi-line data joined by newlines), fed
    the body's chunks as they arrive: a plain splitter, so no generator stands between
    the socket and the events. Without a carriage return in sight the body is cut at
    its blank lines and an event of one `data: ` line (how the runtimes write them) is
    taken whole; anything else is read line by line."""

    __slots__ = ("data", "tail")

    def __init__(self) -> None:
        self.data: list[bytes] = []  # the data lines of an event not ended yet
        self.tail = b""  # what follows the last blank line (or, line by line, the last newline)

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self.tail + chunk if self.tail else chunk
        out: list[bytes] = []
        if self.data or b"\r" in buf:
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                self._line(buf[start:nl].rstrip(b"\r"), out)
                start = nl + 1
            self.tail = buf[start:]
            return out
        *events, self.tail = buf.split(b"\n\n")
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:
                out.append(event[6:])
            else:
                for line in event.split(b"\n"):
                    self._line(line, out)
                self._line(b"", out)
        return out

    def _line(self, line: bytes, out: list[bytes]) -> None:
        """One line, its ending cut: a blank one ends the event."""
        if not line:
            if self.data:
                out.append(b"\n".join(self.data))
                self.data.clear()
        elif line.startswith(b"data:"):
            value = line[5:]
            self.data.append(value[1:] if value.startswith(b" ") else value)
        # comments (":") and other fields (event/id/retry) carry nothing for us

    def end(self) -> list[bytes]:
        """At the body's end: the last event, which needs no blank line."""
        out: list[bytes] = []
        for line in self.tail.split(b"\n"):
            self._line(line.rstrip(b"\r"), out)
        self.tail = b""
        if self.data:
            out.append(b"\n".join(self.data))
            self.data.clear()
        return out
