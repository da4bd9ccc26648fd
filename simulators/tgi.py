"""A wire-faithful Hugging Face TGI double (RUNTIMES.md sections 4 and 6), 3.3.x by
default, 3.1.x with `--tgi-version 3.1` (the shapes before "Fix tool call2", #3076).

Reproduced: connections refused until warm-up is done, then `/health` (and `/ping`,
`GET /`) 200 with an empty body; `/info` with its exact key set; `/v1/models` with
`created: 0` and `owned_by` = model id; Prometheus `tgi_*` metrics (counters
without `_total`, as the Rust exporter writes them); `id: ""` and `"object"`
first; `system_fingerprint` `"<version>-native"`; `model` echoed (the model id
when absent or `"tgi"`); no role-only first chunk, every chunk carries
`role:"assistant"`, EOS gives `content:""` with `finish_reason`, `"usage":null` on
each chunk, a separate usage chunk only with `include_usage` (3.1: usage on the
final chunk); `stop_sequence` passed through unmapped; completions streams with
`finish_reason:""` mid-stream and `eos_token` at the end; in-stream errors
`{"error":{"message","http_status_code":422}}` then `[DONE]` with HTTP 200 (also
for overload and validation); errors `{"error","error_type"}` with 422 validation,
424 generation, 429 overloaded above `--max-concurrent-requests`, 500 incomplete;
plain-text 422 for body type mismatches (`stop` as a string, `logit_bias` as an
object); `top_p: 1.0` rejected; `n` ignored; at most `--max-stop-sequences` stop
strings; grammar tool calls: one call, id `"0"`, `description: null`, no `content`
key, `finish_reason: "stop"`; 3.3 streams array deltas with `name:null` repeated
and no finish chunk after a tool call; 3.1 streams a single-object delta with
`id:""` and the raw `{"function": {"_name": ...}}` text, and object `arguments`
in non-stream answers; `tool_choice:"auto"` without a call re-runs the generation
(twice the TTFT); native `/generate` and `/generate_stream` (no `[DONE]`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import orjson
from aiohttp import web

from simulators import logprobs
from simulators.driver import Outcome, StreamEnded, collect, pump
from simulators.promtext import Exposition, Histogram
from simulators.request import SimRequest, int_or_none, prompt_words_completion, texts_of
from simulators.server import DONE_FRAME, Simulator, SSEStream, frame, json_response
from simulators.tokens import EOS_TOKEN_ID, Token
from simulators.toolcalls import ToolCallPlan, fragments, named_choice, plan_tool_call, tool_names
from simulators.validation import check_body

VERSIONS = {"3.3": "3.3.6-dev0", "3.1": "3.1.1"}
MAX_CLIENT_BATCH_SIZE = 4
_FINISH = {"eos": "eos_token", "length": "length", "stop_sequence": "stop_sequence"}
_STATUS_TYPES = {422: "validation", 424: "generation", 429: "overloaded", 500: "incomplete_generation"}


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


def rejection(message: str) -> web.Response:
    """axum's `Json` extractor rejection: plain text, 422 for a type mismatch."""
    return web.Response(status=422, text=f"Failed to deserialize the JSON body into the target type: {message}")


def finish_for_chat(finish: str | None) -> str | None:
    """`FinishReason::format(true)`: EOS becomes "stop", the rest pass through."""
    if finish == "eos":
        return "stop"
    return _FINISH.get(finish or "", finish)


def visible(token: Token) -> str:
    """TGI's stop criterion matches the stop string at the end of the output and
    keeps it: the text includes the stop sequence."""
    if token.finish == "stop_sequence" and isinstance(token.matched, str):
        return token.text + token.matched
    return token.text


def full_text(outcome: Outcome) -> str:
    text = outcome.text(0)
    if outcome.finish[0] == "stop_sequence" and isinstance(outcome.matched[0], str):
        text += outcome.matched[0]
    return text


class TgiSimulator(Simulator):
    kind = "tgi"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.legacy = self.opts.tgi_version == "3.1"
        self.version = VERSIONS[self.opts.tgi_version]
        self.fingerprint = f"{self.version}-native"
        self.request_count = 0
        self.success = 0
        self.failures: dict[str, int] = {}
        self.input_length_hist = Histogram((1, 10, 50, 100, 500, 1000, 5000, 10000))
        self.generated_hist = Histogram((1, 10, 50, 100, 500, 1000, 5000))

    @property
    def max_total_tokens(self) -> int:
        return self.opts.max_model_len

    @property
    def max_input_tokens(self) -> int:
        return self.opts.max_model_len - 1

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/chat/completions", self.chat)
        router.add_post("/v1/completions", self.completions)
        router.add_post("/generate", self.generate)
        router.add_post("/generate_stream", self.generate_stream)
        router.add_post("/", self.compat)
        router.add_post("/tokenize", self.tokenize)
        router.add_get("/", self.health)
        router.add_get("/health", self.health)
        router.add_get("/ping", self.health)
        router.add_get("/info", self.info)
        router.add_get("/metrics", self.metrics)
        router.add_get("/v1/models", self.models)

    def auth_required(self, path: str, method: str) -> bool:
        if path == "/":
            return method == "POST"  # `POST /` generates; `GET /` is the health check
        return not (path.startswith("/_sim/") or path in ("/health", "/ping", "/metrics", "/info"))

    def unauthorized(self) -> web.Response:
        return web.Response(status=401)  # TGI answers a bad key with an empty body

    # ---- small endpoints ------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def info(self, request: web.Request) -> web.Response:
        return json_response(
            200,
            {
                "model_id": self.opts.model_name,
                "model_sha": None,
                "model_pipeline_tag": "text-generation",
                "max_concurrent_requests": self.opts.max_concurrent_requests,
                "max_best_of": 2,
                "max_stop_sequences": self.opts.max_stop_sequences,
                "max_input_tokens": self.max_input_tokens,
                "max_total_tokens": self.max_total_tokens,
                "validation_workers": 2,
                "max_client_batch_size": MAX_CLIENT_BATCH_SIZE,
                "router": "text-generation-router",
                "version": self.version,
                "sha": None,
                "docker_label": None,
            },
        )

    async def models(self, request: web.Request) -> web.Response:
        name = self.opts.model_name
        return json_response(
            200, {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": name}]}
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        body, _ = await self.read_body(request)
        inputs = body.get("inputs") if isinstance(body, dict) else None
        if not isinstance(inputs, str):
            return rejection("missing field `inputs` at line 1 column 2")
        out, at = [], 0
        for i, word in enumerate(inputs.split()):
            start = inputs.index(word, at)
            at = start + len(word)
            out.append({"id": 100 + i, "text": word, "start": start, "stop": at})
        return json_response(200, out)

    async def metrics(self, request: web.Request) -> web.Response:
        ex = Exposition({})
        ex.gauge("tgi_queue_size", "", self.waiting)
        ex.gauge("tgi_batch_current_size", "", self.running)
        ex.gauge("tgi_batch_current_max_tokens", "", sum(self.live_prompt_tokens.values()))
        ex.gauge("tgi_batch_max_total_tokens", "", self.max_total_tokens * 16)
        ex.gauge("tgi_batch_next_size", "", 0)
        ex.counter("tgi_request_count", "", self.request_count, suffix="")
        ex.counter("tgi_request_success", "", self.success, suffix="")
        ex.counter(
            "tgi_request_failure",
            "",
            {(("err", k),): float(v) for k, v in self.failures.items()} or {(("err", "validation"),): 0.0},
            suffix="",
        )
        ex.histogram("tgi_request_duration", "", self.e2e_hist)
        ex.histogram("tgi_request_mean_time_per_token_duration", "", self.itl_hist)
        ex.histogram("tgi_request_input_length", "", self.input_length_hist)
        ex.histogram("tgi_request_generated_tokens", "", self.generated_hist)
        return web.Response(status=200, body=ex.text().encode(), headers={"Content-Type": "text/plain"})

    def _failure(self, err: str) -> None:
        self.failures[err] = self.failures.get(err, 0) + 1

    def end_generation(self, sim: SimRequest, finish: str | None, completion_tokens: int, *args: Any) -> None:
        super().end_generation(sim, finish, completion_tokens, *args)
        self.success += 1
        self.input_length_hist.observe(sim.prompt_tokens)
        self.generated_hist.observe(completion_tokens)

    def on_disconnect(self, sim: SimRequest) -> None:
        if sim.request_id in self.recorder.live:
            self._failure("dropped")
        super().on_disconnect(sim)

    # ---- validation (validation.rs) ------------------------------------------------------

    async def _admit_or_refuse(
        self, sim: SimRequest, body: dict, request: web.Request, stream: bool
    ) -> web.StreamResponse | None:
        """Queue admission and parameter validation; TGI's refusal (JSON, or an
        error event then [DONE] on a stream) when either fails, else None."""
        try:
            self._admit(sim)
            self._validate_parameters(sim, body.get("top_p"), body.get("temperature"), sim.max_tokens)
        except TgiError as err:
            self._failure(err.error_type)
            if not stream:
                return err.response()
            s = SSEStream(request, paced=False)
            await s.send(err.openai_event())
            await s.send(DONE_FRAME)
            return await s.finish()
        return None

    def _validate_parameters(self, sim: SimRequest, top_p: Any, temperature: Any, max_new: int | None) -> None:
        if top_p is not None and not (isinstance(top_p, (int, float)) and 0.0 < top_p < 1.0):
            raise TgiError(422, "Input validation error: `top_p` must be > 0.0 and < 1.0", "validation")
        if isinstance(temperature, (int, float)) and temperature < 0:
            raise TgiError(422, "Input validation error: `temperature` must be strictly positive", "validation")
        if len(sim.stop) > self.opts.max_stop_sequences:
            raise TgiError(
                422,
                f"Input validation error: `stop` supports up to {self.opts.max_stop_sequences} "
                f"stop sequences. Given: {len(sim.stop)}",
                "validation",
            )
        if max_new is not None and max_new < 1:
            raise TgiError(422, "Input validation error: `max_new_tokens` must be strictly positive", "validation")
        n = sim.prompt_tokens
        if n >= self.max_input_tokens:
            raise TgiError(
                422,
                f"Input validation error: `inputs` must have less than {self.max_input_tokens} tokens. Given: {n}",
                "validation",
            )
        if max_new is not None and n + max_new > self.max_total_tokens:
            raise TgiError(
                422,
                f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
                f"{self.max_total_tokens}. Given: {n} `inputs` tokens and {max_new} "
                f"`max_new_tokens`",
                "validation",
            )
        if max_new is None:
            sim.max_tokens = self.max_total_tokens - n

    def _admit(self, sim: SimRequest) -> None:
        f = sim.faults
        if f.status is not None and f.status >= 400:
            raise TgiError(
                f.status, f"Simulated failure with status {f.status}", _STATUS_TYPES.get(f.status, "generation")
            )
        if f.overloaded or self.in_flight >= self.opts.max_concurrent_requests:
            raise TgiError(429, "Model is overloaded", "overloaded")

    @staticmethod
    def _type_check(body: dict[str, Any], kind: str) -> web.Response | None:
        """Serde type errors become axum's plain-text 422."""
        if kind == "chat" and not isinstance(body.get("messages"), list):
            return rejection("missing field `messages` at line 1 column 2")
        if kind == "completion" and not isinstance(body.get("prompt"), (str, list)):
            return rejection("missing field `prompt` at line 1 column 2")
        stop = body.get("stop")
        if stop is not None and not isinstance(stop, list):
            return rejection(
                f"stop: invalid type: string {orjson.dumps(stop).decode()}, expected a sequence at line 1 column 2"
            )
        bias = body.get("logit_bias")
        if bias is not None and not isinstance(bias, list):
            return rejection("logit_bias: invalid type: map, expected a sequence at line 1 column 2")
        for problem in check_body(body, kind):
            if problem.kind != "greater_than_equal":  # ranges are validation.rs's job, as JSON 422s
                return rejection(
                    f"{problem.loc}: invalid type: {orjson.dumps(problem.value).decode()}, "
                    f"expected {problem.kind.removesuffix('_type')} at line 1 column 2"
                )
        return None

    async def _read(self, request: web.Request) -> tuple[dict[str, Any] | None, web.Response | None]:
        if request.content_type != "application/json":
            return None, web.Response(status=415, text="Expected request with `Content-Type: application/json`")
        body, bad = await self.read_body(request)
        if bad is not None:
            return None, web.Response(status=400, text=f"Failed to parse the request body as JSON: {bad}")
        if not isinstance(body, dict):
            return None, rejection("invalid type: expected struct at line 1 column 1")
        return body, None

    # ---- chat ---------------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body, problem = await self._read(request)
        if problem is not None:
            return problem
        problem = self._type_check(body, "chat")
        if problem is not None:
            return problem
        self.request_count += 1
        tools = body.get("tools")
        choice = body.get("tool_choice")
        name = named_choice(choice) or (
            choice if isinstance(choice, str) and choice not in ("auto", "none", "required") else None
        )
        if tools and name is not None and name not in tool_names(tools):
            self._failure("tool_error")
            return TgiError(422, f"Tool error: Tool with name {name} not found", "tool_error").response()
        if tools and body.get("response_format") is not None:
            self._failure("tool_error")
            return TgiError(422, "Tool error: Grammar and tools are mutually exclusive", "tool_error").response()
        model = body.get("model")
        model = model if isinstance(model, str) and model != "tgi" else self.opts.model_name
        sim = self.sim_request(body, "chat", "", self.faults(texts_of(body, "chat"), body))
        sim.n = 1  # `n` is documented as UNUSED
        sim.request_id = f"tgi-{id(sim):x}-{self.request_count}"
        stream = bool(body.get("stream"))
        include_usage = (
            bool((body.get("stream_options") or {}).get("include_usage"))
            if isinstance(body.get("stream_options"), dict)
            else False
        )
        forced = {"type": "function", "function": {"name": name}} if name is not None else choice
        plan = plan_tool_call(tools, forced, sim.faults.tool_call) if tools and choice != "none" else None
        if tools and choice in (None, "auto") and plan is None:
            # The model picked `no_tool`: TGI re-runs the whole generation without tools.
            base = sim.faults.ttft_ms if sim.faults.ttft_ms is not None else self.opts.ttft_ms
            sim.faults = dataclasses.replace(sim.faults, ttft_ms=2 * base)
        refused = await self._admit_or_refuse(sim, body, request, stream)
        if refused is not None:
            return refused
        fixed = None
        if plan is not None:
            raw = (
                f'{{"function": {{"_name": "{plan.name}", {plan.arguments_json[1:]}}}'
                if plan.arguments
                else f'{{"function": {{"_name": "{plan.name}"}}}}'
            )
            fixed = fragments(raw) if self.legacy and stream else fragments(plan.arguments_json[1:])
        gen = self.start_generation(sim, request.path, fixed)
        self.live_prompt_tokens[sim.request_id] = sim.prompt_tokens
        outcome = Outcome(n=1)
        created = int(time.time())
        try:
            with self.watch_disconnect(sim):
                if stream:
                    return await self._chat_stream(
                        request, sim, gen, outcome, plan, model, created, include_usage, body
                    )
                await collect(gen, outcome)
                if sim.faults.error_after is not None or sim.faults.cut_after is not None:
                    self.fail_generation(sim)
                    self._failure("generation")
                    if sim.faults.cut_after is not None and request.transport is not None:
                        request.transport.close()
                    return TgiError(
                        424, "Request failed during generation: Server error: simulated failure", "generation"
                    ).response()
                self.end_generation(
                    sim, outcome.main_finish, outcome.completion_tokens, outcome.started, outcome.first_token_at
                )
                return json_response(200, self._chat_full(sim, outcome, plan, model, created, body))
        finally:
            self.live_prompt_tokens.pop(sim.request_id, None)

    def _usage(self, sim: SimRequest, completion: int) -> dict[str, Any]:
        return {
            "prompt_tokens": sim.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": sim.prompt_tokens + completion,
        }

    def _chat_full(
        self,
        sim: SimRequest,
        outcome: Outcome,
        plan: ToolCallPlan | None,
        model: str,
        created: int,
        body: dict[str, Any],
    ) -> dict[str, Any]:
        want_logprobs, top_n = logprobs.requested(body)
        if plan is not None:
            arguments: Any = plan.arguments if self.legacy else "{" + outcome.text(0)
            message: dict[str, Any] = {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "0",
                        "type": "function",
                        "function": {"description": None, "name": plan.name, "arguments": arguments},
                    }
                ],
            }
        else:
            message = {"role": "assistant", "content": full_text(outcome)}
        return {
            "object": "chat.completion",
            "id": "",
            "created": created,
            "model": model,
            "system_fingerprint": self.fingerprint,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": logprobs.content(outcome.texts[0], outcome.token_ids[0], top_n, False)
                    if want_logprobs and plan is None
                    else None,
                    "finish_reason": finish_for_chat(outcome.finish[0]),
                }
            ],
            "usage": self._usage(sim, outcome.completion_tokens),
        }

    async def _chat_stream(
        self,
        request: web.Request,
        sim: SimRequest,
        gen: Any,
        outcome: Outcome,
        plan: ToolCallPlan | None,
        model: str,
        created: int,
        include_usage: bool,
        body: dict[str, Any],
    ) -> web.StreamResponse:
        head = {
            "object": "chat.completion.chunk",
            "id": "",
            "created": created,
            "model": model,
            "system_fingerprint": self.fingerprint,
        }
        stream = SSEStream(request, self.paced(sim), headers={"X-Accel-Buffering": "no"})
        first = [True]
        want_logprobs, top_n = logprobs.requested(body)

        def chunk(delta: dict[str, Any], finish: str | None, usage: Any = None, token: Token | None = None) -> bytes:
            lp = logprobs.content([token.text], [token.token_id], top_n, False) if want_logprobs and token else None
            return frame(
                {
                    **head,
                    "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}],
                    "usage": usage,
                }
            )

        def emit(token: Token) -> list[bytes]:
            finish = finish_for_chat(token.finish) if token.finish else None
            legacy_usage = (
                self._usage(sim, outcome.completion_tokens) if (self.legacy and finish and include_usage) else None
            )
            if plan is not None and token.text:
                if self.legacy:
                    call: Any = {
                        "index": 0,
                        "id": "",
                        "type": "function",
                        "function": {"name": None, "arguments": token.text},
                    }
                    return [chunk({"role": "assistant", "tool_calls": call}, None)]
                out = []
                if first[0]:
                    first[0] = False
                    out.append(
                        chunk(
                            {
                                "role": "assistant",
                                "tool_calls": [
                                    {
                                        "index": 0,
                                        "id": "0",
                                        "type": "function",
                                        "function": {"name": plan.name, "arguments": "{"},
                                    }
                                ],
                            },
                            None,
                        )
                    )
                out.append(
                    chunk(
                        {
                            "role": "assistant",
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "0",
                                    "type": "function",
                                    "function": {"name": None, "arguments": token.text},
                                }
                            ],
                        },
                        None,
                    )
                )
                return out
            if plan is not None and not self.legacy:
                return []  # after the call's JSON closes, TGI buffers again: no finish chunk
            return [chunk({"role": "assistant", "content": visible(token)}, finish, legacy_usage, token)]

        async def fail(s: SSEStream) -> None:
            self._failure("generation")
            await s.send(
                TgiError(
                    424, "Request failed during generation: Server error: simulated failure", "generation"
                ).openai_event()
            )
            await s.send(DONE_FRAME)
            await s.finish()

        try:
            await pump(sim, gen, stream, emit, fail, outcome)
        except StreamEnded:
            self.fail_generation(sim)
            return stream.response
        if include_usage and not self.legacy:
            await stream.send(frame({**head, "choices": [], "usage": self._usage(sim, outcome.completion_tokens)}))
        if not sim.faults.no_done:
            await stream.send(DONE_FRAME)
        self.end_generation(
            sim, outcome.main_finish, outcome.completion_tokens, outcome.started, outcome.first_token_at
        )
        return await stream.finish()

    # ---- completions --------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body, problem = await self._read(request)
        if problem is not None:
            return problem
        problem = self._type_check(body, "completion")
        if problem is not None:
            return problem
        self.request_count += 1
        if body.get("suffix") is not None:
            self._failure("validation")
            return TgiError(
                422, "Suffix is not supported and can be achieved by preprocessing the prompt.", "suffix not supported"
            ).response()
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        if len(prompts) > MAX_CLIENT_BATCH_SIZE:
            self._failure("validation")
            return TgiError(
                422,
                f"Number of prompts exceeds the maximum allowed batch size of {MAX_CLIENT_BATCH_SIZE}",
                "batch size exceeded",
            ).response()
        # One generation per prompt would interleave; the double serves the first prompt, which
        # is what single-prompt clients (the gateway) send.
        sim = self.sim_request(
            {**body, "prompt": prompts[0] if prompts else ""},
            "completion",
            "",
            self.faults(texts_of(body, "completion"), body),
        )
        sim.n = 1
        sim.request_id = f"tgi-{id(sim):x}-{self.request_count}"
        stream = bool(body.get("stream"))
        refused = await self._admit_or_refuse(sim, body, request, stream)
        if refused is not None:
            return refused
        gen = self.start_generation(sim, request.path)
        self.live_prompt_tokens[sim.request_id] = sim.prompt_tokens
        outcome = Outcome(n=1)
        created = int(time.time())
        model = self.opts.model_name  # completions report the model id, not the request's model
        try:
            with self.watch_disconnect(sim):
                if not stream:
                    await collect(gen, outcome)
                    if sim.faults.error_after is not None:
                        self.fail_generation(sim)
                        self._failure("generation")
                        return TgiError(
                            424, "Request failed during generation: Server error: simulated failure", "generation"
                        ).response()
                    self.end_generation(
                        sim, outcome.main_finish, outcome.completion_tokens, outcome.started, outcome.first_token_at
                    )
                    return json_response(
                        200,
                        {
                            "object": "text_completion",
                            "id": "",
                            "created": created,
                            "model": model,
                            "system_fingerprint": self.fingerprint,
                            "choices": [
                                {
                                    "index": 0,
                                    "text": full_text(outcome),
                                    "logprobs": None,
                                    "finish_reason": finish_for_chat(outcome.finish[0]),
                                }
                            ],
                            "usage": self._usage(sim, outcome.completion_tokens),
                        },
                    )
                s = SSEStream(request, self.paced(sim), headers={"X-Accel-Buffering": "no"})

                def emit(token: Token) -> list[bytes]:
                    if token.finish is None:
                        return [
                            frame(
                                {
                                    "object": "text_completion",
                                    "id": "",
                                    "created": created,
                                    "choices": [
                                        {"index": 0, "text": visible(token), "logprobs": None, "finish_reason": ""}
                                    ],
                                    "model": model,
                                    "system_fingerprint": self.fingerprint,
                                }
                            )
                        ]
                    return [
                        frame(
                            {
                                "object": "text_completion",
                                "id": "",
                                "created": created,
                                "model": model,
                                "system_fingerprint": self.fingerprint,
                                "choices": [
                                    {
                                        "index": 0,
                                        "text": visible(token),
                                        "logprobs": None,
                                        "finish_reason": _FINISH.get(token.finish, token.finish),
                                    }
                                ],
                                "usage": self._usage(sim, outcome.completion_tokens),
                            }
                        )
                    ]

                async def fail(st: SSEStream) -> None:
                    self._failure("generation")
                    await st.send(
                        TgiError(
                            424, "Request failed during generation: Server error: simulated failure", "generation"
                        ).openai_event()
                    )
                    await st.send(DONE_FRAME)
                    await st.finish()

                try:
                    await pump(sim, gen, s, emit, fail, outcome)
                except StreamEnded:
                    self.fail_generation(sim)
                    return s.response
                if not sim.faults.no_done:
                    await s.send(DONE_FRAME)
                self.end_generation(
                    sim, outcome.main_finish, outcome.completion_tokens, outcome.started, outcome.first_token_at
                )
                return await s.finish()
        finally:
            self.live_prompt_tokens.pop(sim.request_id, None)

    # ---- native API -----------------------------------------------------------------------

    async def compat(self, request: web.Request) -> web.StreamResponse:
        body, problem = await self._read(request)
        if problem is not None:
            return problem
        if body.get("stream"):
            return await self._native(request, body, stream=True)
        response = await self._native(request, body, stream=False)
        if isinstance(response, web.Response) and response.status == 200 and response.body is not None:
            # `POST /` answers a list of generations.
            return web.Response(status=200, body=b"[" + bytes(response.body) + b"]", content_type="application/json")
        return response

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body, problem = await self._read(request)
        if problem is not None:
            return problem
        return await self._native(request, body, stream=False)

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        body, problem = await self._read(request)
        if problem is not None:
            return problem
        return await self._native(request, body, stream=True)

    async def _native(self, request: web.Request, body: dict[str, Any], stream: bool) -> web.StreamResponse:
        inputs = body.get("inputs")
        if not isinstance(inputs, str):
            return rejection("missing field `inputs` at line 1 column 2")
        params = body.get("parameters") if isinstance(body.get("parameters"), dict) else {}
        stop = params.get("stop")
        if stop is not None and not isinstance(stop, list):
            return rejection("parameters.stop: invalid type: string, expected a sequence at line 1 column 2")
        self.request_count += 1
        words = prompt_words_completion(inputs)
        sim = SimRequest(
            request_id=f"tgi-native-{self.request_count}",
            kind="generate",
            prompt_words=words,
            prompt_text=inputs,
            max_tokens=int_or_none(params.get("max_new_tokens")),
            stop=[s for s in (stop or []) if isinstance(s, str)],
            seed=int_or_none(params.get("seed")),
            faults=self.faults([inputs], body),
        )
        self.retokenize(sim)
        details = bool(params.get("details"))
        try:
            if stream and (params.get("best_of") or 1) != 1:
                raise TgiError(
                    422, "Input validation error: `best_of` != 1 is not supported when streaming tokens", "validation"
                )
            self._admit(sim)
            self._validate_parameters(sim, params.get("top_p"), params.get("temperature"), sim.max_tokens)
        except TgiError as err:
            self._failure(err.error_type)
            if not stream:
                return err.response()
            s = SSEStream(request, paced=False, headers={"X-Accel-Buffering": "no"})
            await s.send(err.native_event())
            return await s.finish()
        gen = self.start_generation(sim, request.path)
        self.live_prompt_tokens[sim.request_id] = sim.prompt_tokens
        outcome = Outcome(n=1)
        prefix = inputs if params.get("return_full_text") else ""

        def token_json(token: Token) -> dict[str, Any]:
            special = token.token_id == EOS_TOKEN_ID
            return {
                "id": token.token_id,
                "text": "</s>" if special else visible(token),
                "logprob": -0.5,
                "special": special,
            }

        try:
            with self.watch_disconnect(sim):
                if not stream:
                    await collect(gen, outcome)
                    if sim.faults.error_after is not None:
                        self.fail_generation(sim)
                        self._failure("generation")
                        return TgiError(
                            424, "Request failed during generation: Server error: simulated failure", "generation"
                        ).response()
                    self.end_generation(
                        sim, outcome.main_finish, outcome.completion_tokens, outcome.started, outcome.first_token_at
                    )
                    result: dict[str, Any] = {"generated_text": prefix + full_text(outcome)}
                    if details:
                        result["details"] = {
                            "finish_reason": _FINISH.get(outcome.finish[0] or "", outcome.finish[0]),
                            "generated_tokens": outcome.completion_tokens,
                            "seed": sim.seed,
                            "prefill": [],
                            "tokens": [
                                {
                                    "id": tid,
                                    "text": "</s>" if tid == EOS_TOKEN_ID else text,
                                    "logprob": -0.5,
                                    "special": tid == EOS_TOKEN_ID,
                                }
                                for tid, text in zip(outcome.token_ids[0], outcome.texts[0])
                            ],
                        }
                    headers = {
                        "x-compute-type": "cpu",
                        "x-prompt-tokens": str(sim.prompt_tokens),
                        "x-generated-tokens": str(outcome.completion_tokens),
                    }
                    return json_response(200, result, headers=headers)
                s = SSEStream(request, self.paced(sim), headers={"X-Accel-Buffering": "no"})
                index = [0]

                def emit(token: Token) -> list[bytes]:
                    index[0] += 1
                    last = token.finish is not None
                    event: dict[str, Any] = {
                        "index": index[0],
                        "token": token_json(token),
                        "generated_text": prefix + full_text(outcome) if last else None,
                        "details": None,
                    }
                    if last and details:
                        event["details"] = {
                            "finish_reason": _FINISH.get(token.finish or "", token.finish),
                            "generated_tokens": outcome.completion_tokens,
                            "seed": sim.seed,
                            "input_length": sim.prompt_tokens,
                        }
                    return [frame(event)]

                async def fail(st: SSEStream) -> None:
                    self._failure("generation")
                    await st.send(
                        TgiError(
                            424, "Request failed during generation: Server error: simulated failure", "generation"
                        ).native_event()
                    )
                    await st.finish()

                try:
                    await pump(sim, gen, s, emit, fail, outcome)
                except StreamEnded:
                    self.fail_generation(sim)
                    return s.response
                self.end_generation(
                    sim, outcome.main_finish, outcome.completion_tokens, outcome.started, outcome.first_token_at
                )
                return await s.finish()  # no [DONE] on the native stream
        finally:
            self.live_prompt_tokens.pop(sim.request_id, None)
