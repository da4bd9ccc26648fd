"""Hugging Face TGI (`text-generation-launcher`, Messages API under /v1), facts from
docs/runtimes.md §4 and `router/src/lib.rs`, `server.rs`, `chat.rs`.

What differs from OpenAI and is handled here:
- requests: `model` selects a LoRA adapter unless it is `"tgi"`, so `"tgi"` is sent
  (option `adapter_id` to pick one); `presence_penalty` is read as
  `repetition_penalty = presence_penalty + 2.0`, so OpenAI's presence penalty has
  no equivalent (400) and a requested `repetition_penalty` r is sent as
  `presence_penalty = r - 2`; `top_p` must lie strictly inside (0, 1): 1 means no
  nucleus cut (dropped), 0 means greedy (temperature 0); `response_format` becomes
  `{"type": "json", "value": <schema>}`; `n` is ignored by TGI (the gateway fans
  out, capability `n=False`); no `logit_bias`, `top_k`, `min_p`, `stop_token_ids`,
  `ignore_eos`, `min_tokens` in its OpenAI API (the `parameters` table: refused with
  400 naming TGI, or dropped, as the model's `unsupported_params` says).
- errors: `{"error": str, "error_type": str}` with 422 for validation, 424 for
  generation, 429 overloaded, 500 incomplete; plain-text 422/400 from axum for
  wrong body types; in a stream `{"error": {"message", "http_status_code": 422}}`
  (422 for every kind, so the message decides) then `[DONE]`.
- context length: "`inputs` tokens + `max_new_tokens` must be <= N" / "`inputs`
  must have less than N tokens".
- finish reasons `stop_sequence`, `eos_token` (stop); `""` on every completions
  chunk before the last (not a finish); never `tool_calls` (the stream guard makes
  a choice with tool calls finish `tool_calls`).
- the matched stop sequence is left in the text: trimmed (`TGIQuirks`).
- tool calls: id `"0"` (>= 3.2) or `""` (< 3.2), replaced by the gateway's own ids
  like every runtime's; no `content` key; no finish chunk after a streamed tool
  call (`TGIQuirks` finishes the choice at `[DONE]`); before 3.2 object `arguments`
  and a single-object stream delta without a name whose arguments are the raw
  grammar output `{"function": {"_name": ..., <args>}}`: buffered and decoded when
  the choice ends. A chosen `no_tool` (or `notify_error` in 2.x) is the model
  answering in text; before 3.2 that text ends without a finish chunk (finished at
  `[DONE]` too; recorded in tests/adapters/recordings/tgi/v3.1/no_tool_stream.json).
- load from Prometheus `/metrics` (`tgi_*`): queue size, batch size, and batch
  tokens over the token budget as the KV usage estimate; no prefix cache.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import aiohttp

from adapters import openai_wire as wire
from adapters import prometheus_text as prom
from adapters.base import (
    Capabilities,
    ErrorEvent,
    Event,
    Finish,
    GenerationRequest,
    LoadSnapshot,
    ParameterSupport,
    TextDelta,
    ToolCallDelta,
)
from adapters.errors import upstream_failed
from adapters.openai import EventFilter
from adapters.runtime_adapter import RuntimeAdapter
from adapters.runtime_errors import ParsedError

# adapters may import engine.text (pure Python, no torch), nothing else of engine/.
from engine.text.stop import StopStringMatcher

# router/src/validation.rs.
CONTEXT = re.compile(
    r"`?inputs`? tokens \+ `?max_new_tokens`? must be <=|`?inputs`? must have less than \d+ tokens", re.IGNORECASE
)

# The pseudo-tools TGI adds for "auto": choosing one means "answer in text".
TEXT_TOOLS = {"no_tool": "content", "notify_error": "error"}

# Statuses as the generic rule reads them: 500 is the backend's fault (-> 502).
_STATUS_BY_ERROR_TYPE = {
    "overloaded": 429,
    "generation": 500,
    "incomplete_generation": 500,
    "stream_serialization_error": 500,
    "validation": 400,
    "template_error": 400,
    "tool_error": 400,
    "missing_template_variable": 400,
}


class TGIAdapter(RuntimeAdapter):
    runtime = "TGI"
    context_pattern = CONTEXT
    capabilities = Capabilities(parallel_tool_calls=False, n=False)
    parameters = ParameterSupport(
        emulated={
            "top_p": "TGI takes only 0 < top_p < 1: 1 (no cut) is left out, 0 is sent as temperature 0",
            "repetition_penalty": "chat sends r as presence_penalty r - 2, which TGI turns back into r",
            "n": "n requests, one per choice (TGI ignores n)",
        },
        rejected={
            "top_k": "not in TGI's OpenAI API",
            "min_p": "TGI has none",
            "presence_penalty": "TGI reads it as repetition_penalty = presence_penalty + 2",
            "logit_bias": "TGI's is unused and typed differently",
            "stop_token_ids": "TGI has none",
            "min_tokens": "TGI has none",
            "ignore_eos": "TGI has none",
        },
    )

    # ---- request ------------------------------------------------------------

    def _build_body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        self._refuse_unsupported(request)
        body = super()._build_body(request, stream)
        s = request.sampling
        body["model"] = self.options.get("adapter_id") or "tgi"
        for name in (
            "n",
            "parallel_tool_calls",
            "top_k",
            "min_p",
            "stop_token_ids",
            "min_tokens",
            "ignore_eos",
            "logit_bias",
            "presence_penalty",
            "repetition_penalty",
        ):
            body.pop(name, None)
        if s.repetition_penalty is not None:
            if request.kind == "chat":
                body["presence_penalty"] = s.repetition_penalty - 2.0  # lib.rs: + 2.0 on the way in
            else:
                body["repetition_penalty"] = s.repetition_penalty  # CompletionRequest has it
        if s.top_p is not None and s.top_p >= 1.0:
            body.pop("top_p", None)
        elif s.top_p is not None and s.top_p <= 0.0:
            body.pop("top_p", None)
            body["temperature"] = 0.0
        if request.response_format is not None:
            grammar = tgi_grammar(request.response_format)
            if grammar is None:
                body.pop("response_format", None)
            else:
                body["response_format"] = grammar
        return body

    def _refuse_unsupported(self, request: GenerationRequest) -> None:
        """Features TGI lacks, whatever the model's policy (sampling parameters are
        the `parameters` table's)."""
        s = request.sampling
        if request.kind == "completion":
            if s.logprobs:
                raise self._unsupported("logprobs on /v1/completions", "logprobs")
            if request.echo:
                raise self._unsupported("echo", "echo")
            if isinstance(request.prompt, list):
                raise self._unsupported("token-id prompts", "prompt")
        if request.response_format and request.response_format.get("type") not in (
            "text",
            "json_object",
            "json_schema",
        ):
            raise self._unsupported(f"response_format type {request.response_format.get('type')!r}", "response_format")

    # ---- errors ---------------------------------------------------------------

    def _classify(self, status: int, parsed: ParsedError) -> int | None:
        if parsed.type in _STATUS_BY_ERROR_TYPE:
            return _STATUS_BY_ERROR_TYPE[parsed.type]
        if status == 424:
            return 500
        message = parsed.message.lower()
        # In a stream every error says 422; its message tells what happened.
        if "overloaded" in message:
            return 429
        if "incomplete generation" in message or "failed during generation" in message:
            return 500
        return None

    # ---- decoding -------------------------------------------------------------

    def _decode_chunk(self, payload: dict, chat: bool) -> list[Event]:
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason") == "":
                choice["finish_reason"] = None  # completions: "" means "not yet"
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), dict):
                delta["tool_calls"] = [delta["tool_calls"]]  # < 3.2: one object, not a list
        return wire.decode_chunk(payload, chat, self.name)

    def _decode_response(self, payload: dict, chat: bool) -> list[Event]:
        if chat:
            for choice in payload.get("choices") or []:
                message = choice.get("message") if isinstance(choice, dict) else None
                if isinstance(message, dict) and isinstance(message.get("tool_calls"), list):
                    _text_tools_to_content(message)
        return wire.decode_response(payload, chat, self.name)

    def _event_filter(self, request: GenerationRequest) -> EventFilter | None:
        if not request.sampling.stop and not request.tools:
            return None  # nothing to trim, no tool calls: the events need no help
        return TGIQuirks(request, self.name)

    # ---- load -----------------------------------------------------------------

    async def load(self) -> LoadSnapshot:
        try:
            status, raw = await self._get("/metrics")
        except (TimeoutError, aiohttp.ClientError, OSError):
            return LoadSnapshot()
        read_at = time.time()
        if status != 200:
            return LoadSnapshot(read_at=read_at)
        return parse_tgi_metrics(raw.decode(errors="replace"), read_at)


def parse_tgi_metrics(text: str, read_at: float) -> LoadSnapshot:
    samples = prom.parse(text)
    waiting = prom.total(samples, "tgi_queue_size")
    running = prom.total(samples, "tgi_batch_current_size")
    used = prom.total(samples, "tgi_batch_current_max_tokens")
    budget = prom.total(samples, "tgi_batch_max_total_tokens")
    kv = used / budget if used is not None and budget else None
    return LoadSnapshot(
        waiting=None if waiting is None else int(waiting),
        running=None if running is None else int(running),
        kv_usage=None if kv is None else min(kv, 1.0),
        prefix_hit_rate=None,
        read_at=read_at,
    )


def tgi_grammar(response_format: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI `response_format` -> TGI's `{"type": "json", "value": schema}` (None: no grammar)."""
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return {"type": "json", "value": schema if isinstance(schema, dict) else {"type": "object"}}
    if kind == "json_object":
        return {"type": "json", "value": {"type": "object"}}
    return None


def _text_tools_to_content(message: dict[str, Any]) -> None:
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
