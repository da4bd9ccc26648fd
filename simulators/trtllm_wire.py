"""TensorRT-LLM's wire shapes: flat `{"object":"error",...}` errors, answers with
`reasoning_content:""` and `tool_calls:[]`, and the stream's chunks: a role frame
written with a trailing space, chat chunks without nulls, completions chunks with
theirs, tool deltas repeating `"type":"function"`, and usage whenever
`stream_options` is present (even `{}`)."""

from __future__ import annotations

import os
from typing import Any

from aiohttp import web

from simulators.driver import Outcome
from simulators.request import SimRequest
from simulators.server import json_response
from simulators.shapes import OpenAiReply, StreamUsage, openai_finish, usage_counts
from simulators.sse import frame
from simulators.tokens import Token
from simulators.toolcalls import ToolCallPlan


def flat_error(
    status: int, message: str, type_: str = "BadRequestError", code: int | str | None = None
) -> web.Response:
    body = {
        "object": "error",
        "message": message,
        "type": type_,
        "param": None,
        "code": status if code is None else code,
    }
    return json_response(status, body)


def stop_reason(finish: str | None, matched: Any) -> Any:
    return matched if finish == "stop_sequence" else None


def tool_call_id() -> str:
    return f"chatcmpl-tool-{os.urandom(16).hex()}"


def stream_usage(body: dict[str, Any]) -> StreamUsage:
    """StreamOptions.include_usage defaults to True: any `stream_options` object, even `{}`, asks for usage."""
    options = body.get("stream_options")
    if not isinstance(options, dict):
        return StreamUsage(False, False)
    final = options.get("include_usage", True) is not False
    return StreamUsage(final, final and bool(options.get("continuous_usage_stats")))


class TrtllmReply(OpenAiReply):
    """What TRT-LLM's chat and completions answers share; `model` is echoed from the request."""

    def __init__(self, body: dict[str, Any], sim: SimRequest, cached: int, kind: str) -> None:
        super().__init__(body, sim, cached, kind, body.get("model"), stream_usage(body))

    def usage(self, completion: int) -> dict[str, Any]:
        return {
            **usage_counts(self.sim.prompt_tokens, completion),
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }

    def error_answer(self) -> web.Response:
        return flat_error(400, "Generation failed: simulated executor error")

    def closing(self, outcome: Outcome) -> list[bytes]:
        if not self.include_usage:
            return []
        return [frame({**self.head, "choices": [], "usage": self.usage(outcome.completion_tokens)})]


class TrtllmChat(TrtllmReply):
    stream_object_name = "chat.completion.chunk"

    def __init__(self, body: dict[str, Any], sim: SimRequest, cached: int, plan: ToolCallPlan | None) -> None:
        super().__init__(body, sim, cached, "chat")
        self.plan = plan
        self.tool_started = [False] * max(1, sim.n)

    def answer(self, outcome: Outcome) -> web.Response:
        choices = []
        for i in range(outcome.n):
            calls = []
            content = outcome.text(i)
            if self.plan is not None:
                call = {"name": self.plan.name, "arguments": content}
                calls = [{"id": tool_call_id(), "type": "function", "function": call}]
                content = ""
            message = {
                "role": "assistant",
                "content": content,
                "reasoning_content": "",
                "reasoning": None,
                "tool_calls": calls,
            }
            choices.append(
                {
                    "index": i,
                    "message": message,
                    "logprobs": self.asked.for_chat(outcome.texts[i], outcome.token_ids[i])
                    if self.plan is None
                    else None,
                    "finish_reason": openai_finish(outcome.finish[i], self.plan is not None),
                    "stop_reason": stop_reason(outcome.finish[i], outcome.matched[i]),
                    "mm_embedding_handle": None,
                    "disaggregated_params": None,
                    "avg_decoded_tokens_per_iter": None,
                }
            )
        body = {
            "id": self.sim.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage(outcome.completion_tokens),
            "prompt_token_ids": None,
            "prompt_token_ids_b64": None,
        }
        return json_response(200, body)

    def opening(self, outcome: Outcome) -> list[bytes]:
        frames = []
        for i in range(outcome.n):
            chunk: dict[str, Any] = {**self.head, "choices": [{"index": i, "delta": {"role": "assistant"}}]}
            if self.continuous:
                chunk["usage"] = self.running_usage(outcome)
            frames.append(frame(chunk)[:-2] + b" \n\n")  # the first frame has a space after the JSON
        return frames

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        i = token.index
        if self.plan is not None and token.text:
            out = []
            if not self.tool_started[i]:
                self.tool_started[i] = True
                function = {"name": self.plan.name, "arguments": ""}
                call = {"id": tool_call_id(), "type": "function", "index": 0, "function": function}
                out.append(frame({**self.head, "choices": [{"index": i, "delta": {"tool_calls": [call]}}]}))
            # `type` is a non-null default, so it repeats on every argument delta.
            call = {"type": "function", "index": 0, "function": {"arguments": token.text}}
            out.append(frame({**self.head, "choices": [{"index": i, "delta": {"tool_calls": [call]}}]}))
            return out
        choice: dict[str, Any] = {"index": i, "delta": {"content": token.text, "reasoning_content": ""}}
        if token.text and self.asked.chat:  # chunks drop nulls: the key appears only with values
            choice["logprobs"] = self.asked.for_chat([token.text], [token.token_id])
        if token.finish:
            choice["finish_reason"] = openai_finish(token.finish, self.plan is not None)
            if token.finish == "stop_sequence":
                choice["stop_reason"] = token.matched
        chunk = {**self.head, "choices": [choice]}
        if self.continuous:
            chunk["usage"] = self.running_usage(outcome)
        return [frame(chunk)]

    def error_event(self) -> None:
        return None  # the chat generator re-raises: no error event, no [DONE]


class TrtllmCompletion(TrtllmReply):
    stream_object_name = "text_completion"

    def __init__(self, body: dict[str, Any], sim: SimRequest, cached: int) -> None:
        super().__init__(body, sim, cached, "completion")

    def answer(self, outcome: Outcome) -> web.Response:
        choices = [
            {
                "index": i,
                "text": self.sim.completion_text(i, outcome.text(i)),
                "token_ids": None,
                "logprobs": self.asked.for_completion(outcome.texts[i], outcome.token_ids[i]),
                "context_logits": None,
                "finish_reason": openai_finish(outcome.finish[i], False),
                "stop_reason": stop_reason(outcome.finish[i], outcome.matched[i]),
                "disaggregated_params": None,
                "avg_decoded_tokens_per_iter": None,
            }
            for i in range(outcome.n)
        ]
        body = {
            "id": self.sim.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage(outcome.completion_tokens),
            "prompt_token_ids": None,
        }
        return json_response(200, body)

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        choice = {
            "index": token.index,
            "text": token.text,
            "token_ids": None,
            "logprobs": self.asked.for_completion([token.text], [token.token_id]),
            "finish_reason": openai_finish(token.finish, False) if token.finish else None,
            "stop_reason": stop_reason(token.finish, token.matched),
            "avg_decoded_tokens_per_iter": None,
        }
        usage = self.running_usage(outcome) if self.continuous else None  # completions chunks keep their nulls
        return [frame({**self.head, "choices": [choice], "usage": usage})]

    def error_event(self) -> bytes:
        failure = {"message": "Simulated executor error", "type": "server_error", "code": None, "param": None}
        return frame({"error": failure})
