"""The `response` object: what every answer of this API is built around.

`ResponseShell` holds what is fixed when a response is created (its id, its
creation time and the request fields the object echoes); `build` adds what the
generation decided (status, output, usage, error). The echoed fields are the
ones OpenAI's schema requires, with this gateway's honest values: sampling
parameters the client did not send are `null` (the runtime's default applies),
not OpenAI's model defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from adapters.base import Usage
from adapters.errors import GatewayError
from gateway.openai.responses.request import ResponsesRequest

# `response.error.code` is an enum in OpenAI's schema; a gateway failure maps onto it.
ERROR_CODES = {429: "rate_limit_exceeded", 400: "invalid_prompt"}


@dataclass(slots=True)
class ResponseShell:
    id: str
    created_at: int
    echo: dict[str, Any]
    # `echo` serialized, without its braces: a stream sends the object at least three
    # times (created, in_progress, the terminal event), and the echo is most of it.
    echo_json: bytes = b""

    def own_fields(
        self,
        status: str,
        output: list[dict[str, Any]] | orjson.Fragment,
        error: GatewayError | None,
        incomplete_reason: str | None,
        completed_at: int | None,
    ) -> dict[str, Any]:
        """The fields this answer sets itself, in the wire's order (the echoed request
        fields and `usage` follow them)."""
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": completed_at,
            "error": response_error(error) if error is not None else None,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "output": output,
        }

    def build(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: Usage | None,
        error: GatewayError | None = None,
        incomplete_reason: str | None = None,
        completed_at: int | None = None,
    ) -> dict[str, Any]:
        out = {**self.own_fields(status, output, error, incomplete_reason, completed_at), **self.echo}
        if usage is not None:  # an object or absent in OpenAI's schema, never null
            out["usage"] = usage_object(usage)
        return out

    def build_json(
        self,
        status: str,
        output: list[dict[str, Any]] | orjson.Fragment,
        usage: Usage | None,
        error: GatewayError | None = None,
        incomplete_reason: str | None = None,
        completed_at: int | None = None,
    ) -> bytes:
        """`orjson.dumps(build(...))`, byte for byte, without rebuilding or
        reserializing the echoed fields (the same keys in the same order: `build`'s
        own fields, then the echo, then `usage`)."""
        if not self.echo_json:
            self.echo_json = orjson.dumps(self.echo)[1:-1]  # never empty: the schema's fields
        own = orjson.dumps(self.own_fields(status, output, error, incomplete_reason, completed_at))
        usage_json = b',"usage":' + orjson.dumps(usage_object(usage)) if usage is not None else b""
        return own[:-1] + b"," + self.echo_json + usage_json + b"}"


def new_shell(request: ResponsesRequest, response_id: str, created_at: int) -> ResponseShell:
    echo = {
        "background": False,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "model": request.model,
        "parallel_tool_calls": request.parallel_tool_calls,
        "previous_response_id": request.previous_response_id,
        "prompt_cache_key": request.prompt_cache_key,
        "reasoning": None,
        "safety_identifier": request.safety_identifier,
        "service_tier": "default",
        "store": request.store,
        "temperature": request.temperature,
        "text": request.text,
        "tool_choice": request.tool_choice,
        "tools": request.tools,
        "top_logprobs": request.top_logprobs,
        "top_p": request.top_p,
        "truncation": "disabled",
        "metadata": request.metadata,
    }
    if request.user is not None:  # a string or absent in OpenAI's schema, never null
        echo["user"] = request.user
    return ResponseShell(response_id, created_at, echo)


def usage_object(usage: Usage) -> dict[str, Any]:
    # The schema requires every detail. Runtimes report no reasoning tokens and no
    # cache writes, and an unknown cached count is reported as none cached.
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens or 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def response_error(err: GatewayError) -> dict[str, Any]:
    return {"code": ERROR_CODES.get(err.status, "server_error"), "message": err.message}
