"""OpenAI request bodies -> `GenerationRequest`, with the spec's validation rules.

Every rule answers 400 with the offending `param` named; the readers of the fields
chat and completions share are in gateway/openai/request_fields.py. Fields the gateway does
not interpret are kept in `extra` and passed to runtimes that understand them
(OpenAI says unknown fields are ignored; benchmark clients send `ignore_eos`,
`min_tokens`, `continuous_usage_stats`, ...).

`max_tokens` precedence: `max_completion_tokens` wins when both are sent (it is
the current name; `max_tokens` is deprecated for chat).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from adapters.base import SAMPLING_PARAMETERS, GenerationRequest
from adapters.errors import GatewayError, invalid_request
from gateway.openai.request_fields import (
    boolean,
    extra_fields,
    integer,
    model_name,
    sampling_params,
    shown,
    shown_key,
    stream_options,
)

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
# Nesting a request may use. orjson reads 1,024 levels but writes only 254, and every
# level costs a frame wherever the body is walked; legitimate requests stay far below
# this: OpenAI's structured outputs allow 10 levels of object nesting in a schema,
# which is about 25 JSON levels inside `tools[i].function.parameters` or
# `response_format.json_schema.schema` (tests/gateway/openai/test_requests.py measures one).
MAX_JSON_DEPTH = 64
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# Chat fields the gateway reads; everything else goes to `extra`.
CHAT_FIELDS = set(SAMPLING_PARAMETERS) | {
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "max_completion_tokens",
    "top_logprobs",
    "stream",
    "stream_options",
    "user",
    "priority",
    "functions",
    "function_call",
    "store",
    "metadata",
    "service_tier",
}
COMPLETION_FIELDS = (
    CHAT_FIELDS - {"messages", "tools", "tool_choice", "parallel_tool_calls", "max_completion_tokens", "top_logprobs"}
) | {"prompt", "echo", "best_of", "suffix"}
# OpenAI's own fields the gateway does not read: passed on in `extra` like unknown ones,
# but never refused as unknown by a model's `unknown_params: reject`.
OPENAI_UNREAD_FIELDS = {
    "prompt_cache_key",
    "safety_identifier",
    "reasoning_effort",
    "verbosity",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
}


def unknown_fields(extra: dict[str, Any]) -> tuple[str, ...]:
    """The fields of `extra` OpenAI's API does not define."""
    if not extra:
        return ()
    return tuple(k for k in extra if k not in OPENAI_UNREAD_FIELDS)


def parse_json_body(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """The request body as a JSON object, refused with 400 before any other check
    when it is not one or when it nests deeper than `max_depth` levels."""
    if not raw:
        raise invalid_request("The request body is empty; send a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_request(
            f"We could not parse the JSON body of your request ({exc}). Send a valid JSON object."
        ) from None
    if not isinstance(body, dict):
        raise invalid_request(f"The request body must be a JSON object, not {type(body).__name__}.")
    # Depth needs at least that many brackets: counting them (in C) spares the walk
    # for almost every request.
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        too_deep = deepest_field(body, max_depth)
        if too_deep is not None:
            raise invalid_request(
                f"'{shown_key(too_deep)}' nests JSON deeper than {max_depth} levels; flatten it.",
                param=shown_key(too_deep),
            )
    return body


def session_keys(body: dict[str, Any]) -> dict[str, str]:
    """The body's explicit conversation keys, for routing's session affinity."""
    if "prompt_cache_key" not in body and "user" not in body:  # most bodies
        return {}
    return {name: v for name in ("prompt_cache_key", "user") if isinstance(v := body.get(name), str) and v}


def deepest_field(body: dict[str, Any], max_depth: int) -> str | None:
    """The first top-level field whose value takes the body past `max_depth` levels
    (the body itself is level 1), or None."""
    for key, value in body.items():
        if not isinstance(value, (dict, list)):
            continue
        stack = [(value, 2)]
        while stack:
            node, depth = stack.pop()
            if depth > max_depth:
                return key
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, (dict, list)):
                    stack.append((child, depth + 1))
    return None


# ---- chat ------------------------------------------------------------------------


def _messages(body: dict) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid_request("'messages' is required and must be a non-empty array.", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise invalid_request(f"'messages[{i}]' must be an object.", param=f"messages[{i}]")
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise invalid_request(
                f"'messages[{i}].role' must be one of {sorted(ROLES)}; got {shown(role)}.",
                param=f"messages[{i}].role",
            )
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise invalid_request(
                f"'messages[{i}].content' must be a string or an array of content parts.",
                param=f"messages[{i}].content",
            )
        if content is None and role in ("user", "system", "developer"):
            raise invalid_request(
                f"'messages[{i}].content' is required for role {role!r}.", param=f"messages[{i}].content"
            )
        if role == "tool" and not isinstance(m.get("tool_call_id"), str):
            raise invalid_request(
                f"'messages[{i}].tool_call_id' is required for role 'tool'.", param=f"messages[{i}].tool_call_id"
            )
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise invalid_request(f"'messages[{i}].tool_calls' must be an array.", param=f"messages[{i}].tool_calls")
    return messages


def _tools(body: dict) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise invalid_request("'tools' must be an array of tool definitions.", param="tools")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            raise invalid_request(
                f'\'tools[{i}]\' must be {{"type": "function", "function": {{...}}}}.', param=f"tools[{i}]"
            )
        name = fn.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise invalid_request(
                f"'tools[{i}].function.name' must be 1-64 letters, digits, '_' or '-'; got {shown(name)}.",
                param=f"tools[{i}].function.name",
            )
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise invalid_request(
                f"'tools[{i}].function.parameters' must be a JSON Schema object.",
                param=f"tools[{i}].function.parameters",
            )
    return tools or None


def _tool_choice(body: dict, tools: list[dict] | None) -> str | dict | None:
    tc = body.get("tool_choice")
    if tc is None:
        return None
    if not tools:
        raise invalid_request("'tool_choice' is only allowed when 'tools' are specified.", param="tool_choice")
    if isinstance(tc, str):
        if tc not in ("none", "auto", "required"):
            raise invalid_request(
                f"'tool_choice' must be 'none', 'auto', 'required' or a named function; got {shown(tc)}.",
                param="tool_choice",
            )
        return tc
    if isinstance(tc, dict) and tc.get("type") == "function" and isinstance(tc.get("function"), dict):
        name = tc["function"].get("name")
        names = {t["function"]["name"] for t in tools}
        if not isinstance(name, str) or name not in names:
            raise invalid_request(
                f"'tool_choice' names function {shown(name)}, which is not in 'tools' ({', '.join(sorted(names))}).",
                param="tool_choice",
            )
        return tc
    raise invalid_request(
        "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}.",
        param="tool_choice",
    )


def _response_format(body: dict) -> dict[str, Any] | None:
    rf = body.get("response_format")
    if rf is None:
        return None
    if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise invalid_request(
            "'response_format.type' must be 'text', 'json_object' or 'json_schema'.", param="response_format"
        )
    if rf["type"] == "text":
        return None
    if rf["type"] == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict) or not isinstance(js.get("name"), str):
            raise invalid_request(
                "'response_format.json_schema' must be an object with a 'name'.", param="response_format.json_schema"
            )
        if "schema" in js and not isinstance(js["schema"], dict):
            raise invalid_request(
                "'response_format.json_schema.schema' must be a JSON Schema object.",
                param="response_format.json_schema.schema",
            )
    return rf


# The chat options `parse_chat` reads besides the sampling fields. A body sending none
# of them gets what each reader answers for a field not sent (a test holds both to it).
CHAT_OPTIONS = frozenset(
    {
        "tools",
        "tool_choice",
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
        "parallel_tool_calls",
        "response_format",
    }
)


def parse_chat(body: dict[str, Any], request_id: str) -> GenerationRequest:
    model = model_name(body)
    messages = _messages(body)
    if CHAT_OPTIONS.isdisjoint(body):  # most requests: no tools, no logprobs
        sampling = sampling_params(body, max_tokens=integer(body, "max_tokens", 1, 1 << 31))
        stream, include_usage = stream_options(body)
        tools = tool_choice = response_format = parallel = None
    else:
        tools = _tools(body)
        tool_choice = _tool_choice(body, tools)
        max_tokens = integer(body, "max_completion_tokens", 1, 1 << 31)
        if max_tokens is None:
            max_tokens = integer(body, "max_tokens", 1, 1 << 31)
        else:
            integer(body, "max_tokens", 1, 1 << 31)  # still validated
        sampling = sampling_params(body, max_tokens=max_tokens)
        logprobs = bool(boolean(body, "logprobs"))
        top_logprobs = integer(body, "top_logprobs", 0, 20)
        if top_logprobs is not None and not logprobs:
            raise invalid_request("'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs")
        sampling.logprobs = logprobs
        sampling.top_logprobs = top_logprobs or 0
        stream, include_usage = stream_options(body)
        parallel = boolean(body, "parallel_tool_calls")
        response_format = _response_format(body)
    extra = extra_fields(body, CHAT_FIELDS)
    return GenerationRequest(
        request_id=request_id,
        model=model,
        kind="chat",
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=True if parallel is None else parallel,
        response_format=response_format,
        sampling=sampling,
        stream=stream,
        include_usage=include_usage,
        extra=extra,
        unknown_fields=unknown_fields(extra),
        session_keys=session_keys(body),
    )


# ---- legacy completions ---------------------------------------------------------------


def split_prompts(body: dict[str, Any]) -> list[str | list[int]]:
    """The prompts of a completions request: one per choice group."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return [prompt]
        if all(
            isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p) for p in prompt
        ):
            return list(prompt)
    raise invalid_request(
        "'prompt' is required: a string, an array of strings, an array of token ids, "
        "or an array of token-id arrays, and not empty.",
        param="prompt",
    )


def parse_completion(body: dict[str, Any], request_id: str) -> list[GenerationRequest]:
    """One request per prompt; the gateway merges their choices in order."""
    model = model_name(body)
    prompts = split_prompts(body)
    max_tokens = integer(body, "max_tokens", 1, 1 << 31)
    if "max_tokens" not in body:
        max_tokens = 16  # the legacy API's documented default
    logprobs_k = integer(body, "logprobs", 0, 5)
    echo = bool(boolean(body, "echo"))
    stream, include_usage = stream_options(body)
    n = integer(body, "n", 1, 128) or 1
    best_of = integer(body, "best_of", 1, 128)
    if best_of is not None and best_of != n and best_of != 1:
        raise GatewayError(
            400,
            "'best_of' other than 1 or n is not supported by this gateway.",
            param="best_of",
            code="unsupported_parameter",
        )
    if body.get("suffix"):
        raise GatewayError(
            400, "'suffix' (insertion) is not supported by this gateway.", param="suffix", code="unsupported_parameter"
        )
    if echo and stream:
        raise GatewayError(
            400, "'echo' is not supported together with 'stream'.", param="echo", code="unsupported_parameter"
        )
    extra = extra_fields(body, COMPLETION_FIELDS)
    unknown = unknown_fields(extra)
    keys = session_keys(body)
    response_format = _response_format(body)
    requests = []
    for i, prompt in enumerate(prompts):
        sampling = sampling_params(body, max_tokens=max_tokens)
        sampling.logprobs = logprobs_k is not None
        sampling.top_logprobs = logprobs_k or 0
        requests.append(
            GenerationRequest(
                request_id=request_id if len(prompts) == 1 else f"{request_id}-{i}",
                model=model,
                kind="completion",
                prompt=prompt,
                sampling=sampling,
                stream=stream,
                include_usage=include_usage,
                echo=echo,
                response_format=response_format,
                extra=dict(extra),
                unknown_fields=unknown,
                session_keys=dict(keys),
            )
        )
    return requests


def estimate_prompt_tokens(req: GenerationRequest) -> int:
    """A cheap upper-leaning estimate for quota reservation (reconciled later):
    about four characters per token, plus a few tokens of template per message."""
    if req.messages is not None:
        chars = 0
        for m in req.messages:
            c = m.get("content")
            chars += len(c) if isinstance(c, str) else len(orjson.dumps(c)) if c is not None else 0
            if m.get("tool_calls"):
                chars += len(orjson.dumps(m["tool_calls"]))
        if req.tools:
            chars += len(orjson.dumps(req.tools))
        return chars // 4 + 4 * len(req.messages) + 1
    if isinstance(req.prompt, list):
        return len(req.prompt)
    return len(req.prompt or "") // 4 + 1
