"""The TGI dialect (`text-generation-launcher`, Messages API): `model` is `"tgi"`,
penalties and `top_p` translated, `response_format` as a grammar TGI accepts
(`grammar`), `{"error", "error_type"}` errors, and what only the whole answer shows
in `TGIQuirks` (adapters/tgi_quirks.py). Facts and sources: docs/adapters.md "TGI",
docs/runtimes.md §4.
"""

from __future__ import annotations

import re
import time
from typing import Any

import aiohttp

from adapters import openai_wire as wire
from adapters import prometheus_text as prom
from adapters.base import Capabilities, Event, GenerationRequest, LoadSnapshot, ParameterSupport
from adapters.dialect import EventFilter, Reader
from adapters.openai import OpenAIDialect
from adapters.runtime_errors import ParsedError
from adapters.tgi_quirks import TGIQuirks, text_tools_to_content

# router/src/validation.rs.
CONTEXT = re.compile(
    r"`?inputs`? tokens \+ `?max_new_tokens`? must be <=|`?inputs`? must have less than \d+ tokens", re.IGNORECASE
)

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

# Fields of the OpenAI body TGI has no place for (or reads otherwise, see `body`).
_NOT_SENT = (
    *("n", "parallel_tool_calls", "top_k", "min_p", "stop_token_ids", "min_tokens", "ignore_eos"),
    *("logit_bias", "presence_penalty", "repetition_penalty"),
)


class TGIDialect(OpenAIDialect):
    runtime = "TGI"
    api_prefix = "/v1"
    health_path = "/health"
    context_pattern = CONTEXT
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

    def declare_capabilities(self) -> Capabilities:
        return Capabilities(tools=self.option("tools", True), parallel_tool_calls=False, n=False)

    # ---- request ------------------------------------------------------------------------------

    def body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        self._refuse_unsupported(request)
        body = super().body(request, stream)
        s = request.sampling
        body["model"] = self.options.get("adapter_id") or "tgi"  # any other name selects a LoRA adapter
        for name in _NOT_SENT:
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
            grammar = self.grammar(request.response_format)
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
                raise self.unsupported("logprobs on /v1/completions", "logprobs")
            if request.echo:
                raise self.unsupported("echo", "echo")
            if isinstance(request.prompt, list):
                raise self.unsupported("token-id prompts", "prompt")
        kind = request.response_format.get("type") if request.response_format else None
        if kind not in (None, "text", "json_object", "json_schema"):
            raise self.unsupported(f"response_format type {kind!r}", "response_format")

    def grammar(self, response_format: dict[str, Any]) -> dict[str, Any] | None:
        """OpenAI's `response_format` -> TGI's grammar (None: none). TGI compiles a JSON
        grammar only from a schema whose root has `properties` (validation.rs; the root
        then allows those keys only), so any JSON object goes as a regex, and a schema
        without root `properties` (an array, a bare string) is refused here."""
        if response_format.get("type") == "json_object":
            return {"type": "regex", "value": JSON_OBJECT_REGEX}
        if response_format.get("type") != "json_schema":
            return None
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict) or _any_object(schema):
            return {"type": "regex", "value": JSON_OBJECT_REGEX}
        if "properties" not in schema:
            raise self.unsupported(
                "a json_schema whose root has no `properties` (TGI constrains only objects with declared properties)",
                "response_format",
            )
        return {"type": "json", "value": schema}

    # ---- answers ------------------------------------------------------------------------------

    def classify(self, status: int, parsed: ParsedError) -> int | None:
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

    def decode_chunk(self, payload: dict, chat: bool) -> list[Event]:
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason") == "":
                choice["finish_reason"] = None  # completions: "" means "not yet"
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), dict):
                delta["tool_calls"] = [delta["tool_calls"]]  # < 3.2: one object, not a list
        return wire.decode_chunk(payload, chat, self.backend)

    def decode_response(self, payload: dict, chat: bool) -> list[Event]:
        if chat:
            for choice in payload.get("choices") or []:
                message = choice.get("message") if isinstance(choice, dict) else None
                if isinstance(message, dict) and isinstance(message.get("tool_calls"), list):
                    text_tools_to_content(message)
        return wire.decode_response(payload, chat, self.backend)

    def event_filter(self, request: GenerationRequest) -> EventFilter | None:
        if not request.sampling.stop and not request.tools:
            return None  # nothing to trim, no tool calls: the events need no help
        return TGIQuirks(request, self.backend)

    async def load(self, http: Reader) -> LoadSnapshot:
        try:
            status, raw = await http.get("/metrics")
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


# ---- any JSON object, as a regex (compact, nested three containers deep) ----------------------

_STRING = r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
_SCALAR = _STRING + r"|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?|true|false|null"


def _json_value(depth: int) -> str:
    if depth == 0:
        return f"({_SCALAR})"
    inner = _json_value(depth - 1)
    return rf"({_SCALAR}|{_json_object(inner)}|\[({inner}(,{inner})*)?\])"


def _json_object(value: str) -> str:
    return rf"\{{({_STRING}:{value}(,{_STRING}:{value})*)?\}}"


JSON_OBJECT_REGEX = _json_object(_json_value(2))
_ANY_OBJECT_KEYS = {"type", "title", "description", "$schema"}


def _any_object(schema: dict[str, Any]) -> bool:
    """A schema that says "an object" and nothing more."""
    return schema.get("type") == "object" and set(schema) <= _ANY_OBJECT_KEYS
