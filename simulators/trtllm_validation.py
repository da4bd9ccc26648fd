"""TensorRT-LLM's request validation: every request model is `extra="forbid"`, so an
undeclared field (`parallel_tool_calls`, `store`, `metadata`, ...) or a missing
`model` fails, and FastAPI's RequestValidationError reaches the client stringified
into a bare string `error` (not the usual object)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from simulators.faults import MAGIC_FIELD
from simulators.server import json_response
from simulators.structured_requests import trtllm_format_problems
from simulators.trtllm_wire import flat_error
from simulators.validation import check_body

_COMMON_FIELDS = {
    "model",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "n",
    "presence_penalty",
    "response_format",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "user",
    "best_of",
    "use_beam_search",
    "top_k",
    "top_p_min",
    "min_p",
    "repetition_penalty",
    "length_penalty",
    "early_stopping",
    "stop_token_ids",
    "include_stop_str_in_output",
    "ignore_eos",
    "min_tokens",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "truncate_prompt_tokens",
    "lora_request",
    "echo",
    "add_special_tokens",
    "disaggregated_params",
    "conversation_params",
    "priority",
    "prompt_ignore_length",
    "thinking_token_budget",
    MAGIC_FIELD,
}
CHAT_FIELDS = _COMMON_FIELDS | {
    "messages",
    "prompt_token_ids",
    "prompt_token_ids_b64",
    "top_logprobs",
    "max_completion_tokens",
    "max_tokens",
    "tools",
    "tool_choice",
    "reasoning_effort",
    "thinking",
    "add_generation_prompt",
    "documents",
    "chat_template",
    "chat_template_kwargs",
    "injected_chat_template_kwargs",
    "media_io_kwargs",
    "cache_salt",
    "agent_hierarchy",
    "mm_processor_kwargs",
}
COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt", "max_tokens", "suffix", "return_context_logits", "detokenize"}
STREAM_OPTION_FIELDS = {"include_usage", "continuous_usage_stats"}


def validation_error(problems: list[dict[str, Any]]) -> web.Response:
    """FastAPI's RequestValidationError, stringified into a bare string `error`."""
    return json_response(400, {"error": str(problems)})


def _problem(kind: str, loc: tuple[Any, ...], message: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": loc, "msg": message, "input": value}


def json_decode_error(reason: str) -> web.Response:
    problem = _problem("json_invalid", ("body", 0), "JSON decode error", {})
    return validation_error([{**problem, "ctx": {"error": reason}}])


def validate(body: Any, kind: str) -> web.Response | None:
    """TRT-LLM's refusal of a chat (`kind` "chat") or completions body, else None."""
    if not isinstance(body, dict):
        message = "Input should be a valid dictionary or object to extract fields from"
        return validation_error([_problem("model_attributes_type", ("body",), message, body)])
    allowed = CHAT_FIELDS if kind == "chat" else COMPLETION_FIELDS
    required = ("messages", "model") if kind == "chat" else ("model", "prompt")
    problems = [_problem("missing", ("body", name), "Field required", body) for name in required if name not in body]
    extra = "Extra inputs are not permitted"
    problems += [_problem("extra_forbidden", ("body", k), extra, v) for k, v in body.items() if k not in allowed]
    options = body.get("stream_options")
    if isinstance(options, dict):
        problems += [
            _problem("extra_forbidden", ("body", "stream_options", k), extra, v)
            for k, v in options.items()
            if k not in STREAM_OPTION_FIELDS
        ]
    problems += [p.as_pydantic() for p in check_body(body, kind)]
    if body.get("response_format") is not None:
        problems += trtllm_format_problems(body["response_format"])
    if problems:
        return validation_error(problems)
    if options and not body.get("stream"):
        message = "Value error, Stream options can only be defined when stream is true."
        return validation_error([_problem("value_error", ("body",), message, body)])
    if kind == "completion" and body.get("suffix"):
        return validation_error([_problem("value_error", ("body",), "Value error, suffix is not supported", body)])
    if kind == "chat" and body.get("tool_choice") not in (None, "none") and not body.get("tools"):
        return flat_error(400, "When using `tool_choice`, `tools` must be set.")
    return None
