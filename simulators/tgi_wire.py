"""TGI's wire shapes: errors `{"error","error_type"}` (and, inside an OpenAI stream,
`{"error":{"message","http_status_code":422}}`), answers with `id: ""` and
`"object"` first, chat chunks that all carry `role:"assistant"` and `"usage":null`,
completions chunks with `finish_reason:""` mid-stream, grammar tool calls (3.3 and
the pre-3.2 shapes), and the native `/generate` and `/generate_stream` events."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from simulators.driver import Outcome, Reply
from simulators.faults import Faults
from simulators.logprobs import Asked
from simulators.request import SimRequest, object_field
from simulators.server import json_response
from simulators.sse import frame
from simulators.tokens import EOS_TOKEN_ID, Token
from simulators.toolcalls import ToolCallPlan

_FINISH = {"eos": "eos_token", "length": "length", "stop_sequence": "stop_sequence"}
EOS_TEXT = "</s>"  # the text of the double's EOS token
STREAM_HEADERS = {"X-Accel-Buffering": "no"}


class TgiError(Exception):
    def __init__(self, status: int, message: str, error_type: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type

    def response(self) -> web.Response:
        return json_response(self.status, {"error": self.message, "error_type": self.error_type})

    def openai_event(self) -> bytes:
        # infer/mod.rs `into_openai_event`: the status is hard-coded to 422.
        return frame({"error": {"message": self.message, "http_status_code": 422}})

    def native_event(self) -> bytes:
        return frame({"error": self.message, "error_type": self.error_type})


class FailureCounts(dict[str, int]):
    """`tgi_request_failure{err=...}`: refusals and failed generations by error type."""

    def count(self, err: str) -> None:
        self[err] = self.get(err, 0) + 1

    def generation_error(self) -> TgiError:
        self.count("generation")
        return TgiError(424, "Request failed during generation: Server error: simulated failure", "generation")


def rejection(message: str) -> web.Response:
    """axum's `Json` extractor rejection: plain text, 422 for a type mismatch."""
    return web.Response(status=422, text=f"Failed to deserialize the JSON body into the target type: {message}")


def native_finish(finish: str | None) -> str | None:
    return _FINISH.get(finish or "", finish)


def finish_for_chat(finish: str | None) -> str | None:
    """`FinishReason::format(true)`: EOS becomes "stop", the rest pass through."""
    if finish == "eos":
        return "stop"
    return native_finish(finish)


def visible(token: Token) -> str:
    """TGI's stop criterion matches the stop string at the end of the output and
    keeps it: the text includes the stop sequence."""
    if token.finish == "stop_sequence" and isinstance(token.matched, str):
        return token.text + token.matched
    return token.text


def full_text(outcome: Outcome, index: int = 0) -> str:
    text = outcome.text(index)
    matched = outcome.matched[index]
    if outcome.finish[index] == "stop_sequence" and isinstance(matched, str):
        text += matched
    return text


class TgiReply(Reply):
    """What every TGI answer shares: its failure counter, the generation error (424, or an
    error event), and the unbuffered stream header."""

    headers = STREAM_HEADERS

    def __init__(self, sim: SimRequest, failures: FailureCounts) -> None:
        self.sim = sim
        self.failures = failures

    def error_answer(self) -> web.Response:
        return self.failures.generation_error().response()

    def failed_answer(self, request: web.Request, faults: Faults) -> web.Response | None:
        return self.error_answer() if faults.error_after is not None else None

    def error_event(self) -> bytes:
        return self.failures.generation_error().openai_event()

    def usage(self, completion: int, prompt: int | None = None) -> dict[str, Any]:
        prompt = self.sim.prompt_tokens if prompt is None else prompt
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class TgiOpenAiReply(TgiReply):
    """What TGI's chat and completions answers share: every body and chunk is
    `object, id "", created, model, system_fingerprint`, then `choices` and `usage`."""

    def __init__(self, sim: SimRequest, failures: FailureCounts, created: int, model: str, fingerprint: str) -> None:
        super().__init__(sim, failures)
        self.created = created
        self.model = model
        self.fingerprint = fingerprint

    def document(self, object_name: str, choices: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
        return {
            "object": object_name,
            "id": "",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
            "usage": usage,
        }


class TgiChat(TgiOpenAiReply):
    def __init__(
        self,
        sim: SimRequest,
        failures: FailureCounts,
        created: int,
        model: str,
        fingerprint: str,
        body: dict[str, Any],
        plan: ToolCallPlan | None,
        legacy: bool,
        no_tool: bool = False,
    ) -> None:
        super().__init__(sim, failures, created, model, fingerprint)
        self.asked = Asked.of(body, "chat", with_bytes=False)
        self.include_usage = bool(object_field(body, "stream_options").get("include_usage"))
        self.plan = plan
        self.legacy = legacy
        self.no_tool = no_tool  # tools were offered and the model chose `no_tool`
        self.first_call = True

    def failed_answer(self, request: web.Request, faults: Faults) -> web.Response | None:
        if faults.error_after is None and faults.cut_after is None:
            return None
        answer = self.error_answer()
        if faults.cut_after is not None and request.transport is not None:
            request.transport.close()
        return answer

    def answer(self, outcome: Outcome) -> web.Response:
        if self.plan is not None:
            arguments: Any = self.plan.arguments if self.legacy else "{" + outcome.text(0)
            function = {"description": None, "name": self.plan.name, "arguments": arguments}
            message: dict[str, Any] = {
                "role": "assistant",
                "tool_calls": [{"id": "0", "type": "function", "function": function}],
            }
        else:
            message = {"role": "assistant", "content": full_text(outcome)}
        choice = {
            "index": 0,
            "message": message,
            "logprobs": self.asked.for_chat(outcome.texts[0], outcome.token_ids[0]) if self.plan is None else None,
            "finish_reason": finish_for_chat(outcome.finish[0]),
        }
        usage = self.usage(outcome.completion_tokens)
        return json_response(200, self.document("chat.completion", [choice], usage))

    def chunk(self, delta: dict[str, Any], finish: str | None, usage: Any = None, token: Token | None = None) -> bytes:
        lp = self.asked.for_chat([token.text], [token.token_id]) if token is not None else None
        choice = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}
        return frame(self.document("chat.completion.chunk", [choice], usage))

    def tool_chunk(self, name: str | None, arguments: str) -> bytes:
        call = {"index": 0, "id": "0", "type": "function", "function": {"name": name, "arguments": arguments}}
        return self.chunk({"role": "assistant", "tool_calls": [call]}, None)

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        if self.plan is not None and self.legacy:
            return [self.legacy_tool_chunk(token, outcome)]
        if self.legacy and self.no_tool and token.finish == "eos":
            return []  # before 3.2 the `no_tool` text ends at its closing quote: no finish chunk
        if self.plan is not None and token.text:
            out = []
            if self.first_call:
                self.first_call = False
                out.append(self.tool_chunk(self.plan.name, "{"))
            out.append(self.tool_chunk(None, token.text))
            return out
        if self.plan is not None:
            return []  # after the call's JSON closes, TGI buffers again: no finish chunk
        finish = finish_for_chat(token.finish) if token.finish else None
        # Before 3.2 the usage rode on the final chunk.
        usage = self.usage(outcome.completion_tokens) if self.legacy and finish and self.include_usage else None
        return [self.chunk({"role": "assistant", "content": visible(token)}, finish, usage, token)]

    def legacy_tool_chunk(self, token: Token, outcome: Outcome) -> bytes:
        """Before 3.2 every generated token of a call, the EOS token's text and its finish
        included, is a single-object tool-call delta with `id: ""` (recorded at v3.1.1)."""
        text = EOS_TEXT if token.finish == "eos" and not token.text else token.text
        finish = finish_for_chat(token.finish) if token.finish else None
        usage = self.usage(outcome.completion_tokens) if finish and self.include_usage else None
        call = {"index": 0, "id": "", "type": "function", "function": {"name": None, "arguments": text}}
        return self.chunk({"role": "assistant", "tool_calls": call}, finish, usage)

    def closing(self, outcome: Outcome) -> list[bytes]:
        if not self.include_usage or self.legacy:
            return []
        return [frame(self.document("chat.completion.chunk", [], self.usage(outcome.completion_tokens)))]


class TgiCompletion(TgiOpenAiReply):
    """Completions report the model id, not the request's model. A batch of prompts gets
    one choice per prompt, and in a stream each prompt's last chunk carries that prompt's
    own usage."""

    def answer(self, outcome: Outcome) -> web.Response:
        choices = [
            {
                "index": i,
                "text": full_text(outcome, i),
                "logprobs": None,
                "finish_reason": finish_for_chat(outcome.finish[i]),
            }
            for i in range(outcome.n)
        ]
        usage = self.usage(outcome.completion_tokens)
        return json_response(200, self.document("text_completion", choices, usage))

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        i = token.index
        if token.finish is None:
            choice = {"index": i, "text": visible(token), "logprobs": None, "finish_reason": ""}
            # Mid-stream chunks are another struct: `choices` before `model`, and no `usage` key.
            chunk = {"object": "text_completion", "id": "", "created": self.created, "choices": [choice]}
            return [frame({**chunk, "model": self.model, "system_fingerprint": self.fingerprint})]
        choice = {"index": i, "text": visible(token), "logprobs": None, "finish_reason": native_finish(token.finish)}
        usage = self.usage(outcome.counts[i], self.sim.prompt_tokens_of(i))
        return [frame(self.document("text_completion", [choice], usage))]


class TgiNative(TgiReply):
    """`/generate` and `/generate_stream`: `generated_text`, optional `details`, and
    token events; the native stream has no [DONE]."""

    done = False

    def __init__(self, sim: SimRequest, failures: FailureCounts, prefix: str, details: bool) -> None:
        super().__init__(sim, failures)
        self.prefix = prefix  # the prompt, with `return_full_text`
        self.details = details
        self.events = 0

    def answer(self, outcome: Outcome) -> web.Response:
        result: dict[str, Any] = {"generated_text": self.prefix + full_text(outcome)}
        if self.details:
            result["details"] = {
                "finish_reason": native_finish(outcome.finish[0]),
                "generated_tokens": outcome.completion_tokens,
                "seed": self.sim.seed,
                "prefill": [],
                "tokens": [token_json(i, text, text) for i, text in zip(outcome.token_ids[0], outcome.texts[0])],
            }
        headers = {
            "x-compute-type": "cpu",
            "x-prompt-tokens": str(self.sim.prompt_tokens),
            "x-generated-tokens": str(outcome.completion_tokens),
        }
        return json_response(200, result, headers=headers)

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        self.events += 1
        last = token.finish is not None
        event: dict[str, Any] = {
            "index": self.events,
            "token": token_json(token.token_id, token.text, visible(token)),
            "generated_text": self.prefix + full_text(outcome) if last else None,
            "details": None,
        }
        if last and self.details:
            event["details"] = {
                "finish_reason": native_finish(token.finish),
                "generated_tokens": outcome.completion_tokens,
                "seed": self.sim.seed,
                "input_length": self.sim.prompt_tokens,
            }
        return [frame(event)]

    def error_event(self) -> bytes:
        return self.failures.generation_error().native_event()


def token_json(token_id: int, text: str, shown: str) -> dict[str, Any]:
    special = token_id == EOS_TOKEN_ID
    return {"id": token_id, "text": EOS_TEXT if special else shown, "logprob": -0.5, "special": special}
