"""A `POST /v1/responses` body -> a validated `ResponsesRequest`.

Every field is checked here, once; nothing a client sends can raise anything
but a `GatewayError` 400 naming its `param`. Parameters OpenAI defines that this
gateway cannot honour (background runs, reasoning, conversations, prompt
templates, ...) are refused unless they carry their default, and unknown
parameters are refused, as OpenAI does: a request is never quietly answered as
if it had asked for less.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters.errors import invalid_request
from gateway.openai.request_fields import boolean, integer, model_name, number, unknown_parameter
from gateway.openai.responses.errors import short, unsupported
from gateway.openai.responses.input_items import parse_input
from gateway.openai.responses.request_options import (
    parse_include,
    parse_metadata,
    parse_text,
    parse_tool_choice,
    parse_tools,
)

MIN_OUTPUT_TOKENS = 16  # OpenAI's documented minimum for max_output_tokens
DEFAULT_TEMPERATURE = DEFAULT_TOP_P = 1.0  # OpenAI's documented defaults
MAX_SAFETY_IDENTIFIER = 64  # OpenAI's schema (request and response)

SUPPORTED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "max_output_tokens",
        "max_tool_calls",
        "temperature",
        "top_p",
        "top_logprobs",
        "include",
        "metadata",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "store",
        "previous_response_id",
        "stream",
        "stream_options",
    }
)
# Parameters accepted only with the value that means "the default behaviour".
DEFAULT_ONLY: dict[str, tuple[Any, ...]] = {
    "background": (None, False),
    "truncation": (None, "disabled"),
    "service_tier": (None, "auto", "default"),
    "reasoning": (None,),
    "conversation": (None,),
    "prompt": (None,),
    "context_management": (None,),
    "moderation": (None,),
    "prompt_cache_retention": (None, "in_memory"),
    "prompt_cache_options": (None,),
    "image": (None,),
    "access_programs": (None,),
    "background_options": (None,),
}


@dataclass(slots=True)
class ResponsesRequest:
    """A validated Responses request; `tools`, `tool_choice` and `text` are in the
    Responses' own shapes (what the response object echoes)."""

    model: str
    input_items: list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    # OpenAI's defaults, sent to the runtime and echoed: the response reports what was used
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    top_logprobs: int | None = None
    logprobs: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    store: bool = True
    previous_response_id: str | None = None
    stream: bool = False
    unknown_fields: tuple[str, ...] = ()  # fields OpenAI does not define: the model's `unknown_params` decides


def parse_request(body: Any) -> ResponsesRequest:
    if not isinstance(body, dict):
        raise invalid_request(f"The request body must be a JSON object, not {type(body).__name__}.")
    unknown = []
    for name, value in body.items():
        if name in SUPPORTED:
            continue
        allowed = DEFAULT_ONLY.get(name)
        if allowed is None:
            unknown.append(name)  # the model's `unknown_params` decides (request_fields.refuse_unknown)
            continue
        if not _is_default(value, allowed):
            raise unsupported(f"'{name}' {short(value)} is not supported by this gateway.", name)
    # The optional fields are read only when present (absent, each reader would
    # return the default given here): most requests send few of them, and this is
    # on every request's path (a measured one).
    tools = parse_tools(body["tools"]) if "tools" in body else []
    logprobs = parse_include(body["include"]) if "include" in body else False
    top_logprobs = integer(body, "top_logprobs", 0, 20) if "top_logprobs" in body else None
    if top_logprobs and not logprobs:
        raise invalid_request(
            "'top_logprobs' needs 'include' to contain 'message.output_text.logprobs'.", param="top_logprobs"
        )
    stream = bool(boolean(body, "stream"))
    if "stream_options" in body:
        _stream_options(body["stream_options"], stream)
    parallel = boolean(body, "parallel_tool_calls") if "parallel_tool_calls" in body else None
    store = boolean(body, "store")
    return ResponsesRequest(
        model=model_name(body),
        input_items=parse_input(body.get("input")),
        instructions=_optional_string(body, "instructions") if "instructions" in body else None,
        tools=tools,
        tool_choice=parse_tool_choice(body["tool_choice"], tools) if "tool_choice" in body else "auto",
        parallel_tool_calls=True if parallel is None else parallel,
        text=parse_text(body.get("text")),
        max_output_tokens=integer(body, "max_output_tokens", MIN_OUTPUT_TOKENS, 1 << 31),
        max_tool_calls=integer(body, "max_tool_calls", 0, 1 << 31) if "max_tool_calls" in body else None,
        temperature=_or(number(body, "temperature", 0, 2), DEFAULT_TEMPERATURE),
        top_p=_or(number(body, "top_p", 0, 1), DEFAULT_TOP_P),
        top_logprobs=top_logprobs,
        logprobs=logprobs,
        metadata=parse_metadata(body["metadata"]) if "metadata" in body else {},
        user=_optional_string(body, "user") if "user" in body else None,
        safety_identifier=_optional_string(body, "safety_identifier", MAX_SAFETY_IDENTIFIER)
        if "safety_identifier" in body
        else None,
        prompt_cache_key=_optional_string(body, "prompt_cache_key") if "prompt_cache_key" in body else None,
        store=True if store is None else store,
        previous_response_id=_optional_string(body, "previous_response_id") if "previous_response_id" in body else None,
        stream=stream,
        unknown_fields=tuple(unknown),
    )


def _is_default(value: Any, allowed: tuple[Any, ...]) -> bool:
    # Exact types: `0` must not pass for `False`, nor `1.0` for anything.
    return any(value is None if a is None else (type(value) is type(a) and value == a) for a in allowed)


def _optional_string(body: dict, name: str, max_chars: int | None = None) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_request(f"'{name}' must be a string, not {type(value).__name__}.", param=name)
    if max_chars is not None and len(value) > max_chars:
        raise invalid_request(f"'{name}' may have at most {max_chars} characters; got {len(value)}.", param=name)
    return value


def _stream_options(value: Any, stream: bool) -> None:
    if value is None:
        return
    if not stream:
        raise invalid_request("'stream_options' is only allowed when 'stream' is true.", param="stream_options")
    if not isinstance(value, dict):
        raise invalid_request("'stream_options' must be an object.", param="stream_options")
    for key, option in value.items():
        if key != "include_obfuscation":
            raise unknown_parameter(f"stream_options.{key}")
        if not isinstance(option, bool):
            raise invalid_request(
                "'stream_options.include_obfuscation' must be a boolean.", param="stream_options.include_obfuscation"
            )
        if option:
            raise unsupported(
                "'stream_options.include_obfuscation' true is not supported by this gateway.",
                "stream_options.include_obfuscation",
            )


def _or(value: float | None, default: float) -> float:
    """A sampling value as sent, or its default when absent or null."""
    return default if value is None else value
