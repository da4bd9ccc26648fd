"""vLLM's wire shapes: nested errors with an integer `code`, whole answers full of
nulls, and the stream's chunks (a role chunk per choice, `finish_reason` with
`stop_reason` on the last content chunk, the usage chunk with `choices: []`)."""

from __future__ import annotations

import os
from typing import Any

from aiohttp import web

from simulators.driver import Outcome
from simulators.options import SimOptions
from simulators.request import SimRequest, object_field
from simulators.server import json_response
from simulators.shapes import OpenAiReply, StreamUsage, usage_counts
from simulators.sse import frame
from simulators.tokens import Token
from simulators.toolcalls import ToolCallPlan


def error_body(message: str, type_: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error(status: int, message: str, type_: str = "BadRequestError", param: str | None = None) -> web.Response:
    return json_response(status, error_body(message, type_, status, param))


def finish_of(finish: str | None, matched: Any, tool_called: bool, named: bool) -> tuple[str | None, Any]:
    """(finish_reason, stop_reason) the way vLLM reports an engine finish: `stop_reason` is
    the matched stop string, null for EOS; a natural stop after a tool call is `tool_calls`,
    except for a named tool choice (`resolve_finish_reason`)."""
    if finish == "eos":
        return ("tool_calls" if tool_called and not named else "stop"), None
    if finish == "stop_sequence":
        return "stop", matched
    return finish, None


def tool_call_id() -> str:
    return f"chatcmpl-tool-{os.urandom(8).hex()}"


def stream_usage(body: dict[str, Any], opts: SimOptions) -> StreamUsage:
    """`include_usage`, or the server's `--enable-force-include-usage`; continuous stats only with usage."""
    options = object_field(body, "stream_options")
    final = bool(options.get("include_usage")) or opts.enable_force_include_usage
    return StreamUsage(
        final, final and (bool(options.get("continuous_usage_stats")) or opts.enable_force_include_usage)
    )


class VllmReply(OpenAiReply):
    """What vLLM's chat and completions answers share."""

    def __init__(
        self, opts: SimOptions, fingerprint: str, body: dict[str, Any], sim: SimRequest, cached: int, kind: str
    ) -> None:
        super().__init__(body, sim, cached, kind, opts.model_name, stream_usage(body, opts))
        self.opts = opts
        self.fingerprint = fingerprint

    def usage(self, completion: int, drop_none: bool) -> dict[str, Any]:
        usage = usage_counts(self.sim.prompt_tokens, completion + (self.sim.faults.usage_extra or 0))
        details = {"cached_tokens": self.cached} if self.opts.enable_prompt_tokens_details else None
        if details is not None or not drop_none:
            usage["prompt_tokens_details"] = details
        if not drop_none:
            usage["completion_tokens_details"] = None
        return usage

    def whole(
        self, object_name: str, choices: list[dict[str, Any]], outcome: Outcome, null_keys: tuple[str, ...]
    ) -> web.Response:
        body = {
            "id": self.sim.request_id,
            "object": object_name,
            "created": self.created,
            "model": self.opts.model_name,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": self.fingerprint,
            "usage": self.usage(outcome.completion_tokens, drop_none=False),
        }
        return json_response(200, {**body, **dict.fromkeys(null_keys)})

    def error_answer(self) -> web.Response:
        return error(500, "Simulated engine failure", "InternalServerError")

    def error_event(self) -> bytes:
        return frame(error_body("Simulated engine failure", "InternalServerError", 500))

    def closing(self, outcome: Outcome) -> list[bytes]:
        if not self.include_usage:
            return []
        usage = self.usage(outcome.completion_tokens, drop_none=True)
        return [frame({**self.head, "choices": [], "usage": usage, "system_fingerprint": self.fingerprint})]


class VllmChat(VllmReply):
    stream_object_name = "chat.completion.chunk"

    def __init__(
        self,
        opts: SimOptions,
        fingerprint: str,
        body: dict[str, Any],
        sim: SimRequest,
        cached: int,
        plan: ToolCallPlan | None,
        named: bool,
    ) -> None:
        super().__init__(opts, fingerprint, body, sim, cached, "chat")
        self.plan = plan
        self.named = named
        self.tool_started = [False] * max(1, sim.n)

    def answer(self, outcome: Outcome) -> web.Response:
        choices = []
        for i in range(outcome.n):
            reason, stop_reason = finish_of(outcome.finish[i], outcome.matched[i], self.plan is not None, self.named)
            message: dict[str, Any] = {
                "role": "assistant",
                "content": outcome.text(i),
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
            }
            if self.plan is not None:
                message["content"] = None
                call = {"name": self.plan.name, "arguments": outcome.text(i)}
                message["tool_calls"] = [{"id": tool_call_id(), "type": "function", "function": call}]
            message["reasoning"] = None
            choices.append(
                {
                    "index": i,
                    "message": message,
                    "logprobs": self.asked.for_chat(outcome.texts[i], outcome.token_ids[i]),
                    "finish_reason": reason,
                    "stop_reason": stop_reason,
                    "token_ids": None,
                    "routed_experts": None,
                    "weight_versions": None,
                }
            )
        extra = ("prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params", "ec_transfer_params")
        return self.whole("chat.completion", choices, outcome, (*extra, "metrics"))

    def opening(self, outcome: Outcome) -> list[bytes]:
        frames = []
        for i in range(outcome.n):
            role = {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            chunk = {**self.head, "choices": [role], "prompt_token_ids": None, "prompt_text": None}
            if self.continuous:
                chunk["usage"] = usage_counts(self.sim.prompt_tokens, 0)
            frames.append(frame(chunk))
        return frames

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        i = token.index
        out: list[bytes] = []
        if self.plan is not None and not self.tool_started[i]:
            self.tool_started[i] = True
            call = {"id": tool_call_id(), "type": "function", "index": 0, "function": {"name": self.plan.name}}
            start = {"index": i, "delta": {"tool_calls": [call]}, "logprobs": None, "finish_reason": None}
            out.append(frame({**self.head, "choices": [{**start, "token_ids": None}], "kv_transfer_params": None}))
        lp = self.asked.for_chat([token.text], [token.token_id]) if self.plan is None else None
        if token.finish is None:
            if self.plan is not None:
                delta: dict[str, Any] = {"tool_calls": [{"index": 0, "function": {"arguments": token.text}}]}
            else:
                delta = {"content": token.text}
            choice = {"index": i, "delta": delta, "logprobs": lp, "finish_reason": None, "token_ids": None}
            chunk = {**self.head, "choices": [choice], "kv_transfer_params": None}
        else:
            reason, stop_reason = finish_of(token.finish, token.matched, self.plan is not None, self.named)
            choice = {
                "index": i,
                "delta": {} if self.plan is not None and not token.text else {"content": token.text},
                "logprobs": lp if token.text else None,
                "finish_reason": reason,
                "stop_reason": stop_reason,
                "token_ids": None,
                "weight_versions": None,
            }
            chunk = {**self.head, "choices": [choice]}
            if not self.include_usage:
                chunk["system_fingerprint"] = self.fingerprint
            chunk["kv_transfer_params"] = None
        if self.continuous:
            chunk["usage"] = self.running_usage(outcome)
        out.append(frame(chunk))
        return out


class VllmCompletion(VllmReply):
    stream_object_name = "text_completion"

    def __init__(self, opts: SimOptions, fingerprint: str, body: dict[str, Any], sim: SimRequest, cached: int) -> None:
        super().__init__(opts, fingerprint, body, sim, cached, "completion")

    def answer(self, outcome: Outcome) -> web.Response:
        choices = []
        for i in range(outcome.n):
            reason, stop_reason = finish_of(outcome.finish[i], outcome.matched[i], False, False)
            choices.append(
                {
                    "index": i,
                    "text": self.sim.completion_text(i, outcome.text(i)),
                    "logprobs": self.asked.for_completion(outcome.texts[i], outcome.token_ids[i]),
                    "finish_reason": reason,
                    "stop_reason": stop_reason,
                    "token_ids": None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": None,
                }
            )
        return self.whole("text_completion", choices, outcome, ("kv_transfer_params",))

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        reason, stop_reason = finish_of(token.finish, token.matched, False, False)
        choice = {
            **self.text_choice(token),
            "finish_reason": reason,
            "stop_reason": stop_reason,
            "prompt_token_ids": None,
            "token_ids": None,
        }
        chunk: dict[str, Any] = {**self.head, "choices": [choice]}
        if token.finish is not None:
            choice["weight_versions"] = None
            if not self.include_usage:
                chunk["system_fingerprint"] = self.fingerprint
        if self.continuous:
            chunk["usage"] = self.running_usage(outcome)
        return [frame(chunk)]
