"""Canonical items -> chat `messages`, and a `ResponsesRequest` -> `GenerationRequest`.

A conversation is a list of items: the stored context of a previous response,
that response's output, then the new input. One converter reads them all, so a
continuation sees exactly what a client that resent every item would:
- a message item becomes a chat message (one text part -> a string content);
- consecutive `function_call` items join the assistant message before them as
  its `tool_calls` (chat's shape for one assistant turn that calls tools);
- a `function_call_output` becomes a `tool` message with its `tool_call_id`.
`instructions` become a leading system message and, as OpenAI documents, are not
carried into a continuation (they are not part of the stored context).
"""

from __future__ import annotations

from typing import Any

from adapters.base import GenerationRequest, SamplingParams
from adapters.errors import invalid_request
from gateway.openai.responses.errors import short
from gateway.openai.responses.request import ResponsesRequest


def items_to_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            messages.append({"role": item["role"], "content": _content(item["content"])})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item["output"]
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": output if isinstance(output, str) else _content(output),
                }
            )
    return messages


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, str]]:
    texts = [p["refusal"] if p["type"] == "refusal" else p["text"] for p in parts]
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def check_call_ids(history: list[dict[str, Any]], new_items: list[dict[str, Any]]) -> None:
    """Every new `function_call_output` answers a call made earlier in the conversation."""
    calls = {item["call_id"] for item in history if item["type"] == "function_call"}
    for i, item in enumerate(new_items):
        if item["type"] == "function_call":
            calls.add(item["call_id"])
        elif item["type"] == "function_call_output" and item["call_id"] not in calls:
            raise invalid_request(
                f"No function call found for the function_call_output with call_id {short(item['call_id'])}.",
                param=f"input[{i}].call_id",
            )


def build_generation(
    request: ResponsesRequest, history: list[dict[str, Any]], *, request_id: str, tenant: str | None
) -> GenerationRequest:
    """The chat generation for `request` continuing `history` (empty for a new conversation)."""
    check_call_ids(history, request.input_items)
    messages = items_to_messages(history + request.input_items)
    if not messages:
        raise invalid_request(
            "'input' is required: a string or a non-empty array of input items "
            "(or a 'previous_response_id' to continue).",
            param="input",
        )
    if request.instructions is not None:
        messages.insert(0, {"role": "system", "content": request.instructions})
    tools = [_chat_tool(t) for t in request.tools] or None
    return GenerationRequest(
        request_id=request_id,
        model=request.model,
        kind="chat",
        messages=messages,
        tools=tools,
        tool_choice=_chat_tool_choice(request.tool_choice) if tools else None,
        parallel_tool_calls=request.parallel_tool_calls,
        response_format=_chat_response_format(request.text["format"]),
        sampling=SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_output_tokens,
            logprobs=request.logprobs,
            top_logprobs=request.top_logprobs or 0,
        ),
        stream=request.stream,
        include_usage=True,  # the response object always reports usage
        tenant=tenant,
        unknown_fields=request.unknown_fields,
        # The same explicit conversation keys as chat's (gateway/openai/requests.py), so a
        # model's session affinity keeps a Responses conversation on its backend too.
        session_keys={name: key for name, key in _session_sources(request) if key},
    )


def _session_sources(request: ResponsesRequest) -> tuple[tuple[str, str | None], ...]:
    return (("prompt_cache_key", request.prompt_cache_key), ("user", request.user))


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"]}
    for key in ("description", "parameters", "strict"):
        if tool[key] is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice["name"]}}


def _chat_response_format(fmt: dict[str, Any]) -> dict[str, Any] | None:
    if fmt["type"] == "text":
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    schema = {"name": fmt["name"], "schema": fmt["schema"]}
    if fmt.get("strict") is not None:
        schema["strict"] = fmt["strict"]
    if fmt.get("description") is not None:
        schema["description"] = fmt["description"]
    return {"type": "json_schema", "json_schema": schema}
