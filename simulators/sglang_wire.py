"""SGLang's wire shapes: flat errors `{"object":"error",...}`, answers with
`matched_stop` and a `metadata` block, msgspec-style content chunks
(`reasoning_content:null` first in `delta`, no `usage` key) with each choice's
`finish_reason` in a separate content-free chunk after all content, pydantic-style
tool-call chunks with every null key; completions chunks as pydantic dumps
(`"usage": null`) with the finish on the last output's chunk; and the native
`/generate` shapes with cumulative streamed `text`. Checked against SGLang 0.5.23's
own answers (tests/adapters/recordings/sglang/v0.5.23)."""

from __future__ import annotations

import os
import time
from typing import Any

from aiohttp import web

from simulators.driver import Outcome, Reply
from simulators.faults import Faults
from simulators.options import SimOptions
from simulators.request import SimRequest, object_field
from simulators.server import json_response
from simulators.shapes import OpenAiReply, StreamUsage, openai_finish, usage_counts
from simulators.sse import frame
from simulators.tokens import Token
from simulators.toolcalls import ToolCallPlan


def flat_error(message: str, type_: str, code: int) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": type_, "param": None, "code": code}


def error(status: int, message: str, type_: str = "BadRequestError") -> web.Response:
    return json_response(status, flat_error(message, type_, status))


def tool_call_id() -> str:
    return f"call_{os.urandom(12).hex()}"


def stream_usage(body: dict[str, Any], opts: SimOptions) -> StreamUsage:
    """`include_usage` (or `--stream-response-default-include-usage`); continuous stats on their own."""
    options = object_field(body, "stream_options")
    final = bool(options.get("include_usage")) or opts.stream_response_default_include_usage
    return StreamUsage(final, bool(options.get("continuous_usage_stats")))


class SglangReply(OpenAiReply):
    """What SGLang's chat and completions answers share."""

    object_name = ""

    def __init__(self, opts: SimOptions, body: dict[str, Any], sim: SimRequest, cached: int, model: str, kind: str):
        super().__init__(body, sim, cached, kind, model, stream_usage(body, opts))
        self.opts = opts
        self.finish_chunks: list[bytes] = []

    def usage(self, completion: int) -> dict[str, Any]:
        return {
            **usage_counts(self.sim.prompt_tokens, completion),
            "prompt_tokens_details": {"cached_tokens": self.cached} if self.opts.enable_cache_report else None,
            "reasoning_tokens": 0,
            "completion_tokens_details": None,
        }

    def whole(self, choices: list[dict[str, Any]], outcome: Outcome) -> web.Response:
        body = {
            "id": self.sim.request_id,
            "object": self.object_name,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage(outcome.completion_tokens),
            "metadata": {"weight_version": "default"},
        }
        return json_response(200, body)

    def content_chunk(self, choice: dict[str, Any], outcome: Outcome) -> bytes:
        chunk: dict[str, Any] = {**self.head, "choices": [choice]}
        if self.continuous:
            chunk["usage"] = self.running_usage(outcome)
        return frame(chunk)

    def error_answer(self) -> web.Response:
        return error(500, "Internal server error: simulated engine failure", "InternalServerError")

    def error_event(self) -> bytes:
        return frame({"error": flat_error("Simulated engine failure", "BadRequestError", 400)})

    def closing(self, outcome: Outcome) -> list[bytes]:
        if not self.include_usage:
            return self.finish_chunks
        usage = {**self.head, "choices": [], "usage": self.usage(outcome.completion_tokens)}
        return [*self.finish_chunks, frame(usage)]


def matched_stop(finish: str | None, matched: Any) -> Any:
    return matched if finish in ("eos", "stop_sequence") else None


class SglangChat(SglangReply):
    object_name = "chat.completion"
    stream_object_name = "chat.completion.chunk"

    def __init__(
        self,
        opts: SimOptions,
        body: dict[str, Any],
        sim: SimRequest,
        cached: int,
        model: str,
        plan: ToolCallPlan | None,
    ) -> None:
        super().__init__(opts, body, sim, cached, model, "chat")
        self.plan = plan  # a parsed tool call (without a parser the call is plain text)
        self.role_sent = [False] * max(1, sim.n)
        self.tool_started = [False] * max(1, sim.n)

    def answer(self, outcome: Outcome) -> web.Response:
        choices = []
        for i in range(outcome.n):
            message: dict[str, Any] = {"role": "assistant", "content": outcome.text(i), "reasoning_content": None}
            if self.plan is not None:
                message["content"] = ""
                call = {"name": self.plan.name, "arguments": outcome.text(i)}
                message["tool_calls"] = [{"id": tool_call_id(), "index": 0, "type": "function", "function": call}]
            choices.append(
                {
                    "index": i,
                    "message": message,
                    "logprobs": self.asked.for_chat(outcome.texts[i], outcome.token_ids[i]),
                    "finish_reason": openai_finish(outcome.finish[i], self.plan is not None),
                    "matched_stop": None
                    if self.plan is not None
                    else matched_stop(outcome.finish[i], outcome.matched[i]),
                }
            )
        return self.whole(choices, outcome)

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        i = token.index
        out: list[bytes] = []
        if not self.role_sent[i]:
            self.role_sent[i] = True
            delta = {"reasoning_content": None, "role": "assistant", "content": ""}
            role = {"index": i, "delta": delta, "logprobs": None, "finish_reason": None, "matched_stop": None}
            out.append(frame({**self.head, "choices": [role]}))
        if token.text and self.plan is not None:
            if not self.tool_started[i]:
                self.tool_started[i] = True
                function: dict[str, Any] = {"name": self.plan.name, "arguments": ""}
                out.append(
                    self.tool_chunk(i, {"id": tool_call_id(), "index": 0, "type": "function", "function": function})
                )
            function = {"name": None, "arguments": token.text}
            out.append(self.tool_chunk(i, {"id": None, "index": 0, "type": "function", "function": function}))
        elif token.text:
            choice = {
                "index": i,
                "delta": {"reasoning_content": None, "content": token.text},
                "logprobs": self.asked.for_chat([token.text], [token.token_id]),
                "finish_reason": None,
                "matched_stop": None,
            }
            out.append(self.content_chunk(choice, outcome))
        if token.finish is not None:
            # Each choice's finish_reason comes in its own content-free chunk, after the generation
            # loop has ended for every choice.
            finish = {
                "index": i,
                "delta": {"reasoning_content": None},
                "logprobs": None,
                "finish_reason": openai_finish(token.finish, self.plan is not None),
                "matched_stop": matched_stop(token.finish, token.matched),
            }
            self.finish_chunks.append(frame({**self.head, "choices": [finish]}))
        return out

    def tool_chunk(self, index: int, call: dict[str, Any]) -> bytes:
        """Tool-call chunks are pydantic-serialized: every null key is present."""
        delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": [call]}
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None, "matched_stop": None}
        return frame({**self.head, "choices": [choice], "usage": None})


class SglangCompletion(SglangReply):
    object_name = "text_completion"
    stream_object_name = "text_completion"

    def __init__(self, opts: SimOptions, body: dict[str, Any], sim: SimRequest, cached: int, model: str) -> None:
        super().__init__(opts, body, sim, cached, model, "completion")

    def answer(self, outcome: Outcome) -> web.Response:
        choices = [
            {
                "index": i,
                "text": self.sim.completion_text(i, outcome.text(i)),
                "logprobs": self.asked.for_completion(outcome.texts[i], outcome.token_ids[i]),
                "finish_reason": openai_finish(outcome.finish[i], False),
                "matched_stop": matched_stop(outcome.finish[i], outcome.matched[i]),
            }
            for i in range(outcome.n)
        ]
        return self.whole(choices, outcome)

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        # Unlike chat, `_generate_completion_stream` writes the finish on the chunk of
        # the scheduler's last output, text and all (an empty text if it had none):
        # recorded in tests/adapters/recordings/sglang/v0.5.23/completion_stream.json.
        if not token.text and token.finish is None:
            return []
        choice = {**self.text_choice(token), "finish_reason": None, "matched_stop": None}
        if token.finish is not None:
            choice["finish_reason"] = openai_finish(token.finish, False)
            choice["matched_stop"] = matched_stop(token.finish, token.matched)
        # A pydantic dump: `usage` is there, null, unless continuous stats fill it.
        usage = self.running_usage(outcome) if self.continuous else None
        return [frame({**self.head, "choices": [choice], "usage": usage})]

    def closing(self, outcome: Outcome) -> list[bytes]:
        if not self.include_usage:
            return []
        # The usage chunk is dumped with exclude_none: no null details (recorded).
        usage = {k: v for k, v in self.usage(outcome.completion_tokens).items() if v is not None}
        return [frame({**self.head, "choices": [], "usage": usage})]


class SglangNative(Reply):
    """The native `/generate`: `meta_info` with a structured finish reason; a stream repeats
    the cumulative text and output ids in every event (the default, non-incremental mode)."""

    def __init__(self, sim: SimRequest, cached: int) -> None:
        self.sim = sim
        self.cached = cached

    def meta(self, outcome: Outcome, done: bool) -> dict[str, Any]:
        finish: Any = None
        if done:
            reason = outcome.finish[0]
            if reason == "length":
                finish = {"type": "length", "length": outcome.counts[0]}
            elif reason == "abort":
                finish = {"type": "abort", "message": "Abort before prefill"}
            else:
                finish = {"type": "stop", "matched": outcome.matched[0]}
        return {
            "id": self.sim.request_id,
            "finish_reason": finish,
            "prompt_tokens": self.sim.prompt_tokens,
            "completion_tokens": outcome.counts[0],
            "cached_tokens": self.cached,
            "reasoning_tokens": 0,
            "weight_version": "default",
            "e2e_latency": time.monotonic() - outcome.started,
        }

    def answer(self, outcome: Outcome) -> web.Response:
        body = {"text": outcome.text(0), "output_ids": outcome.token_ids[0], "meta_info": self.meta(outcome, True)}
        return json_response(200, body)

    def failed_answer(self, request: web.Request, faults: Faults) -> web.Response | None:
        return None  # the stream faults only touch streams here

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        meta = self.meta(outcome, token.finish is not None)
        return [frame({"text": outcome.text(0), "output_ids": list(outcome.token_ids[0]), "meta_info": meta})]

    def error_event(self) -> bytes:
        failure = {
            "message": "Simulated engine failure",
            "type": "invalid_request_error",
            "code": 400,
            "retryable": False,
        }
        return frame({"error": failure})


# FastAPI's `str(RequestValidationError)` names the route's file and line; these are
# 0.5.23's (tests/adapters/recordings/sglang/v0.5.23/bad_request.json).
_ROUTES = {
    "chat": ("/v1/chat/completions", 1870, "openai_v1_chat_completions"),
    "completion": ("/v1/completions", 1860, "openai_v1_completions"),
}


def missing_field_message(body: dict[str, Any], kind: str, field_name: str) -> str:
    """SGLang's validation handler: `str(exc)` (the error, then where the route failed)
    followed by `str(exc.errors())`. `input` is the body after the request model's
    before-validators, which set a chat request's `tool_choice`."""
    seen = dict(body)
    if kind == "chat" and seen.get("tool_choice") is None:
        seen["tool_choice"] = "none" if seen.get("tools") is None else "auto"
    problem = {"type": "missing", "loc": ("body", field_name), "msg": "Field required", "input": seen}
    path, line, function = _ROUTES[kind]
    return (
        f"1 validation error:\n  {problem}\n\n"
        f'  File "<site-packages>/sglang/srt/entrypoints/http_server.py", line {line}, in {function}\n'
        f"    POST {path} {[problem]}"
    )
