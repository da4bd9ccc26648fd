"""Pieces of the OpenAI-style wire that vLLM, SGLang and TRT-LLM write the same way
(TGI's differ: see tgi_wire.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from simulators.driver import Outcome, Reply
from simulators.logprobs import Asked
from simulators.request import SimRequest
from simulators.tokens import Token


def usage_counts(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """`usage` in the key order of vLLM's, SGLang's and TRT-LLM's `UsageInfo`."""
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


@dataclass(frozen=True, slots=True)
class StreamUsage:
    """The usage a stream reports, as each runtime reads `stream_options` and its flags."""

    final: bool  # a usage chunk with `choices: []` before [DONE]
    continuous: bool  # running usage on the content chunks


class OpenAiReply(Reply):
    """Chat and completions answers with `id, object, created, model` heads and
    `UsageInfo`-ordered usage."""

    stream_object_name = ""

    def __init__(
        self, body: dict[str, Any], sim: SimRequest, cached: int, kind: str, model: Any, stream_usage: StreamUsage
    ) -> None:
        self.sim = sim
        self.cached = cached  # prompt tokens found in the prefix cache
        self.model = model
        self.asked = Asked.of(body, kind)
        self.include_usage = stream_usage.final
        self.continuous = stream_usage.continuous
        self.created = int(time.time())
        self.head = {"id": sim.request_id, "object": self.stream_object_name, "created": self.created, "model": model}

    def text_choice(self, token: Token) -> dict[str, Any]:
        """How a completions stream choice begins (vLLM, SGLang)."""
        return {
            "index": token.index,
            "text": token.text,
            "logprobs": self.asked.for_completion([token.text], [token.token_id]),
        }

    def running_usage(self, outcome: Outcome) -> dict[str, Any]:
        return usage_counts(self.sim.prompt_tokens, outcome.completion_tokens)
