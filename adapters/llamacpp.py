"""The llama.cpp dialect (`llama-server`): one choice per request, `repeat_penalty`,
logprob alternatives asked and cut to `top_logprobs`, its context-overflow error, load
from `llamacpp:*` metrics and `/slots` shared per server (adapters/llamacpp_load.py),
`/props` read once, `/tokenize` and `/detokenize` in its shape, a forced tool call
opened and ended here (`force_tool_call`); never a client's `X-Conversation-Id` (it would
keep llama.cpp generating after the client left). Facts and sources: docs/adapters.md
"llama.cpp", docs/runtimes.md §8.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from adapters import llamacpp_load as load_view
from adapters import openai_wire as wire
from adapters.base import (
    Capabilities,
    Event,
    GenerationRequest,
    LoadSnapshot,
    LogprobsDelta,
    ParameterSupport,
    TextDelta,
    TokenLogprob,
)
from adapters.dialect import Call, EventFilter, Reader
from adapters.errors import upstream_failed
from adapters.oneshot import DetokenizeRequest, DetokenizeResult, TokenizeRequest, TokenizeResult
from adapters.openai import OpenAIDialect

log = logging.getLogger("switchyard.upstream")

# tools/server/server-context.cpp: the prompt does not fit the slot's context.
CONTEXT = re.compile(r"exceeds the available context size|is larger than the max context size", re.IGNORECASE)
# OpenAI's legacy completions stop at 16 tokens when max_tokens is unset; llama.cpp
# would run to the end of the context.
COMPLETION_DEFAULT_MAX_TOKENS = 16
# llama.cpp reports a zero probability as the lowest float; OpenAI's floor is -9999.
LOGPROB_FLOOR = -9999.0
# How a Hermes-style chat template (tools listed in `<tools>`, calls in `<tool_call>`
# blocks: Qwen 2.5, Hermes, make-tiny's) opens and closes one call.
CALL_OPENER = "<tool_call>\n"
CALL_CLOSER = "</tool_call>"


class LlamaCppDialect(OpenAIDialect):
    runtime = "llama.cpp"
    api_prefix = "/v1"
    health_path = "/health"  # 503 "Loading model" until the model is loaded
    context_pattern = CONTEXT
    parameters = ParameterSupport(
        emulated={
            "n": "n requests, one per choice (llama.cpp runs n only on as many free slots at once)",
            "repetition_penalty": "sent as llama.cpp's repeat_penalty",
        },
        rejected={
            "stop_token_ids": "llama.cpp has none",
            "min_tokens": "llama.cpp has none",
        },
    )

    def __init__(self, backend: str, served_model: str | None = None, options: Mapping[str, Any] | None = None):
        super().__init__(backend, served_model, options)
        self.props: load_view.Props | None = None  # the server's conditions, read once

    def declare_capabilities(self) -> Capabilities:
        """`options.jinja: false` for a server started with --no-jinja (no tool calls);
        `options.embeddings: true` for one started with --embeddings."""
        return Capabilities(
            tools=self.option("jinja", True) and self.option("tools", True),
            n=False,
            cached_tokens=True,
            embeddings=self.option("embeddings", False),
            tokenize=True,
        )

    # ---- request -------------------------------------------------------------------------------

    def body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        if request.kind == "completion" and request.echo:
            raise self.unsupported("echo on /v1/completions", "echo")
        body = super().body(request, stream)
        s = request.sampling
        body.pop("n", None)
        if "repetition_penalty" in body:
            body["repeat_penalty"] = body.pop("repetition_penalty")
        if s.logprobs:
            # At least one alternative, or llama.cpp computes no probabilities at all;
            # the filter cuts them back to what was asked.
            wanted = max(s.top_logprobs, 1)
            if request.kind == "chat":
                body["top_logprobs"] = wanted
            else:
                body["logprobs"] = wanted
        if request.kind == "completion" and s.max_tokens is None:
            body["max_tokens"] = COMPLETION_DEFAULT_MAX_TOKENS
        if request.kind == "chat":
            body["messages"] = [empty_arguments_as_object(m) for m in body.get("messages") or []]
            if request.tools and request.tool_choice not in (None, "auto", "none"):
                self.force_tool_call(body, request)
        return body

    def force_tool_call(self, body: dict[str, Any], request: GenerationRequest) -> None:
        """A forced choice as llama.cpp can follow it: a named choice (it reads none) becomes
        `required` over that tool; with a Hermes-style template the answer is opened with
        the opener as a trailing assistant turn and ended after one call, since its grammar
        lets free text come first and repeats calls without end (docs/adapters.md, "llama.cpp")."""
        choice = request.tool_choice
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            body["tools"] = [t for t in request.tools or [] if (t.get("function") or {}).get("name") == name]
            body["tool_choice"] = "required"
        if self.props is None or not self.props.hermes_calls:
            return
        messages = body.get("messages") or []
        if messages and messages[-1].get("role") == "assistant":
            return  # the client's own prefill: llama.cpp continues one trailing assistant turn
        body["messages"] = [*messages, {"role": "assistant", "content": CALL_OPENER}]
        body["parallel_tool_calls"] = False
        body["stop"] = [*body.get("stop", []), CALL_CLOSER]

    def event_filter(self, request: GenerationRequest) -> EventFilter | None:
        return TopLogprobsCut(request.sampling.top_logprobs) if request.sampling.logprobs else None

    # ---- answers --------------------------------------------------------------------------------

    def decode_chunk(self, payload: dict, chat: bool) -> list[Event]:
        if not chat:
            legacy_logprobs(payload)
        return wire.decode_chunk(payload, chat, self.backend)

    def decode_response(self, payload: dict, chat: bool) -> list[Event]:
        if not chat:
            legacy_logprobs(payload)
        return wire.decode_response(payload, chat, self.backend)

    # ---- load, conditions ---------------------------------------------------------------------

    async def ready(self, http: Reader) -> None:
        """`/props`, once: the slot context (`/tokenize`) and the chat template's call
        tags (`force_tool_call`) are known before the first request."""
        if self.props is None:
            self.props = await load_view.read_props(http)
            if self.props is not None:
                log.info("backend %s runs llama.cpp %s", self.backend, self.props.describe())

    async def load(self, http: Reader) -> LoadSnapshot:
        await self.ready(http)
        return await load_view.load(http, float(self.options.get("load_min_interval_s", 0.5)))

    # ---- one-shot calls ---------------------------------------------------------------------------

    def render_call(self, request: TokenizeRequest) -> Call | None:
        """Messages go through `/apply-template` first: its `/tokenize` takes text only."""
        if request.return_token_strs:
            raise self.unsupported("token strings in /tokenize answers", "return_token_strs")
        if request.messages is None:
            return None
        body: dict[str, Any] = {
            "messages": request.messages,
            "add_generation_prompt": request.add_generation_prompt and not request.continue_final_message,
        }
        if request.continue_final_message:
            body["continue_final_message"] = True
        if request.tools:
            body["tools"] = request.tools
        if request.chat_template_kwargs:
            body["chat_template_kwargs"] = request.chat_template_kwargs
        return Call("/apply-template", body)

    def rendered(self, request: TokenizeRequest, payload: Any) -> TokenizeRequest:
        prompt = payload.get("prompt") if isinstance(payload, dict) else None
        if not isinstance(prompt, str):
            raise upstream_failed(
                self.backend, "its apply-template answer has the wrong shape", internal=repr(payload)[:200]
            )
        return replace(request, prompt=prompt, messages=None, add_special_tokens=request.special_tokens)

    def tokenize_call(self, request: TokenizeRequest) -> Call:
        # parse_special: the rendered template's markers are special tokens, as the chat route reads them.
        body = {"content": request.prompt or "", "add_special": request.special_tokens, "parse_special": True}
        return Call("/tokenize", body)

    def read_tokenize(self, payload: Any, request: TokenizeRequest) -> TokenizeResult:
        tokens = payload.get("tokens") if isinstance(payload, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise upstream_failed(self.backend, "its tokenize answer has the wrong shape", internal=repr(payload)[:200])
        return TokenizeResult(list(tokens), self.props.n_ctx if self.props is not None else 0)

    def detokenize_call(self, request: DetokenizeRequest) -> Call:
        return Call("/detokenize", {"tokens": request.tokens})

    def read_detokenize(self, payload: Any, request: DetokenizeRequest) -> DetokenizeResult:
        text = payload.get("content") if isinstance(payload, dict) else None
        if not isinstance(text, str):
            raise upstream_failed(
                self.backend, "its detokenize answer has the wrong shape", internal=repr(payload)[:200]
            )
        return DetokenizeResult(text)


def empty_arguments_as_object(message: dict[str, Any]) -> dict[str, Any]:
    """An earlier call's `arguments: ""` (OpenAI accepts it) as `"{}"`: llama.cpp parses
    every call's arguments as JSON and answers 500 for an empty string."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list) or not any(_empty_arguments(c) for c in calls):
        return message
    fixed = [{**c, "function": {**c["function"], "arguments": "{}"}} if _empty_arguments(c) else c for c in calls]
    return {**message, "tool_calls": fixed}


def _empty_arguments(call: Any) -> bool:
    fn = call.get("function") if isinstance(call, dict) else None
    return isinstance(fn, dict) and isinstance(fn.get("arguments"), str) and not fn["arguments"].strip()


def legacy_logprobs(payload: dict) -> None:
    """llama.cpp writes completion logprobs in the chat shape (`{"content": [...]}`);
    the legacy shape (`tokens`, `token_logprobs`, `top_logprobs`) in place, for the decoder."""
    for choice in payload.get("choices") or []:
        lp = choice.get("logprobs") if isinstance(choice, dict) else None
        if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
            continue
        items = [item for item in lp["content"] if isinstance(item, dict)]
        choice["logprobs"] = {
            "tokens": [item.get("token", "") for item in items],
            "token_logprobs": [item.get("logprob") for item in items],
            "top_logprobs": [
                {t.get("token", ""): t.get("logprob", LOGPROB_FLOOR) for t in item.get("top_logprobs") or []}
                for item in items
            ],
        }


class TopLogprobsCut(EventFilter):
    """Alternatives cut to the `top_logprobs` the client asked for (the body asked for
    at least one), and llama.cpp's lowest-float "zero probability" raised to -9999."""

    def __init__(self, top: int) -> None:
        self.top = top

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, (TextDelta, LogprobsDelta)) and event.logprobs:
            for item in event.logprobs:
                self._cut(item)
        return [event]

    def at_done(self) -> list[Event]:
        return []

    def _cut(self, item: TokenLogprob) -> None:
        if item.logprob is not None and item.logprob < LOGPROB_FLOOR:
            item.logprob = LOGPROB_FLOOR
        del item.top[self.top :]
        for alt in item.top:
            alt.logprob = max(alt.logprob, LOGPROB_FLOOR)
