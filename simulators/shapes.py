"""Small pieces of the OpenAI-style wire that several runtimes write the same way."""

from __future__ import annotations

from typing import Any


def usage_counts(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """`usage` in the key order of vLLM's, SGLang's and TRT-LLM's `UsageInfo` (TGI orders it differently)."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def openai_finish(finish: str | None, tool_called: bool) -> str | None:
    """An engine finish as SGLang and TRT-LLM report it: a natural stop after a tool call is
    `tool_calls` (named tool choice included), other engine reasons pass through."""
    if finish in ("eos", "stop_sequence"):
        return "tool_calls" if tool_called else "stop"
    return finish


def stream_options(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("stream_options")
    return options if isinstance(options, dict) else {}
