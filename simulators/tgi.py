"""A wire-faithful Hugging Face TGI double (docs/runtimes.md §4 and §6), 3.3.x by
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
(twice the TTFT); native `/generate` and `/generate_stream` (no `[DONE]`); native
`/tokenize` (`[{"id", "text", "start", "stop"}]`) and `/chat_tokenize`; no embeddings
(TGI has none: that is TEI, another server).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from aiohttp import web

from simulators.driver import Outcome
from simulators.promtext import Exposition, Histogram
from simulators.request import (
    SimRequest,
    int_or_none,
    object_field,
    prompt_words_completion,
    render_chat_plain,
    texts_of,
)
from simulators.server import Simulator, json_response
from simulators.sim_tokenizer import WordTokenizer
from simulators.sse import DONE_FRAME, error_stream
from simulators.tgi_validation import (
    MAX_CLIENT_BATCH_SIZE,
    Limits,
    admit,
    check_grammar,
    check_parameters,
    grammar_rejection,
    type_check,
)
from simulators.tgi_wire import STREAM_HEADERS, FailureCounts, TgiChat, TgiCompletion, TgiError, TgiNative, rejection
from simulators.toolcalls import fragments, named_choice, plan_tool_call, tool_names

VERSIONS = {"3.3": "3.3.6-dev0", "3.1": "3.1.1"}


def chosen_tool(tool_choice: Any) -> str | None:
    """The function a `tool_choice` forces: a named choice, or (TGI only) a bare function name."""
    if isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "required"):
        return tool_choice
    return named_choice(tool_choice)


class TgiSimulator(Simulator):
    kind = "tgi"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.legacy = self.opts.tgi_version == "3.1"
        self.version = VERSIONS[self.opts.tgi_version]
        self.fingerprint = f"{self.version}-native"
        self.request_count = 0
        self.success = 0
        self.failures = FailureCounts()
        self.limits = Limits.of(self.opts)
        self.input_length_hist = Histogram((1, 10, 50, 100, 500, 1000, 5000, 10000))
        self.generated_hist = Histogram((1, 10, 50, 100, 500, 1000, 5000))

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/chat/completions", self.chat)
        router.add_post("/v1/completions", self.completions)
        router.add_post("/generate", self.generate)
        router.add_post("/generate_stream", self.generate_stream)
        router.add_post("/", self.compat)
        router.add_post("/tokenize", self.tokenize)
        router.add_post("/chat_tokenize", self.chat_tokenize)
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
                "max_input_tokens": self.limits.max_input_tokens,
                "max_total_tokens": self.limits.max_total_tokens,
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
        """`GenerateRequest` -> `[{"id", "text", "start", "stop"}]` (`encoding_to_tokens`)."""
        body, _ = await self.read_body(request)
        inputs = body.get("inputs") if isinstance(body, dict) else None
        if not isinstance(inputs, str):
            return rejection("missing field `inputs` at line 1 column 2")
        return json_response(200, self._simple_tokens(inputs, body.get("add_special_tokens", True) is not False))

    async def chat_tokenize(self, request: web.Request) -> web.Response:
        """A chat request, templated then tokenized: `{"tokenize_response", "templated_text"}`."""
        body, _ = await self.read_body(request)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return rejection("missing field `messages` at line 1 column 2")
        text = render_chat_plain(messages)
        return json_response(200, {"tokenize_response": self._simple_tokens(text, True), "templated_text": text})

    def _simple_tokens(self, text: str, add_special_tokens: bool) -> list[dict[str, Any]]:
        """Each token with the bytes of `text` it covers; the word tokenizer's offsets are
        the words'. Without offsets (the model tokenizer here) TGI writes empty texts and 0, 0."""
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        if not isinstance(self.tokenizer, WordTokenizer):
            return [{"id": i, "text": "", "start": 0, "stop": 0} for i in ids]
        out, at = [], 0
        for token, word in zip(ids, text.split()):
            start = text.index(word, at)
            at = start + len(word)
            out.append({"id": token, "text": word, "start": start, "stop": at})
        return out

    async def metrics(self, request: web.Request) -> web.Response:
        ex = Exposition({})
        ex.gauge("tgi_queue_size", "", self.waiting)
        ex.gauge("tgi_batch_current_size", "", self.running)
        ex.gauge("tgi_batch_current_max_tokens", "", self.live_tokens)
        ex.gauge("tgi_batch_max_total_tokens", "", self.limits.max_total_tokens * 16)
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

    def end_generation(self, sim: SimRequest, outcome: Outcome) -> None:
        super().end_generation(sim, outcome)
        self.success += 1
        self.input_length_hist.observe(sim.prompt_tokens)
        self.generated_hist.observe(outcome.completion_tokens)

    def on_disconnect(self, sim: SimRequest) -> None:
        if sim.request_id in self.recorder.live:
            self.failures.count("dropped")
        super().on_disconnect(sim)

    # ---- refusals -------------------------------------------------------------------------

    async def _read(self, request: web.Request) -> dict[str, Any] | web.Response:
        """The JSON object body, or axum's refusal of it."""
        if request.content_type != "application/json":
            return web.Response(status=415, text="Expected request with `Content-Type: application/json`")
        body, bad = await self.read_body(request)
        if bad is not None:
            return web.Response(status=400, text=f"Failed to parse the request body as JSON: {bad}")
        if not isinstance(body, dict):
            return rejection("invalid type: expected struct at line 1 column 1")
        return body

    async def _openai_body(self, request: web.Request, kind: str) -> dict[str, Any] | web.Response:
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        return self._refusal(body, kind) or body

    def _refusal(self, body: dict[str, Any], kind: str) -> web.Response | None:
        """An OpenAI body refused before its generation is set up: serde type errors, then (the
        request now counted) what TGI does not do with it."""
        problem = type_check(body, kind)
        if problem is not None:
            return problem
        self.request_count += 1
        err = None
        tools = body.get("tools")
        name = chosen_tool(body.get("tool_choice"))
        # lib.rs `try_into_generate`: `tools` present at all (even `[]`) excludes a grammar,
        # and that is checked before the tool choice is looked up.
        if kind == "chat" and tools is not None and body.get("response_format") is not None:
            err = TgiError(422, "Tool error: Grammar and tools are mutually exclusive", "tool_error")
        elif kind == "chat" and tools and name is not None and name not in tool_names(tools):
            err = TgiError(422, f"Tool error: Tool with name {name} not found", "tool_error")
        elif kind == "completion" and body.get("suffix") is not None:
            message = "Suffix is not supported and can be achieved by preprocessing the prompt."
            err = TgiError(422, message, "suffix not supported")
        elif kind == "completion" and isinstance(body["prompt"], list) and len(body["prompt"]) > MAX_CLIENT_BATCH_SIZE:
            message = f"Number of prompts exceeds the maximum allowed batch size of {MAX_CLIENT_BATCH_SIZE}"
            err = TgiError(422, message, "batch size exceeded")
        if err is None:
            return None
        self.failures.count("tool_error" if kind == "chat" else "validation")
        return err.response()

    def _admit_and_check(self, sim: SimRequest, params: dict[str, Any], grammar: Any = None) -> None:
        admit(sim, self.in_flight, self.limits)
        check_parameters(sim, params.get("top_p"), params.get("temperature"), sim.max_tokens, self.limits)
        check_grammar(sim, grammar)

    async def _openai_refusal(
        self, request: web.Request, sim: SimRequest, body: dict[str, Any], stream: bool, grammar: Any = None
    ) -> web.StreamResponse | None:
        """Queue admission and parameter validation; TGI's refusal when either fails (JSON, or
        an error event then [DONE] on a stream), else None."""
        try:
            self._admit_and_check(sim, body, grammar)
        except TgiError as err:
            self.failures.count(err.error_type)
            if not stream:
                return err.response()
            return await error_stream(request, [err.openai_event(), DONE_FRAME])
        return None

    def _openai_request(self, body: dict[str, Any], kind: str) -> SimRequest:
        """One choice per prompt: `n` is documented as UNUSED, and a completions batch of
        prompts is generated prompt by prompt, choice `i` answering prompt `i`."""
        faults = self.faults(texts_of(body, kind), body)
        sim = self.sim_request({**body, "n": 1}, kind, "", faults)
        sim.request_id = f"tgi-{id(sim):x}-{self.request_count}"
        return sim

    # ---- OpenAI endpoints ------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._openai_body(request, "chat")
        if isinstance(body, web.Response):
            return body
        tools = body.get("tools")
        choice = body.get("tool_choice")
        name = chosen_tool(choice)
        model = body.get("model")
        model = model if isinstance(model, str) and model != "tgi" else self.opts.model_name
        sim = self._openai_request(body, "chat")
        stream = bool(body.get("stream"))
        forced = {"type": "function", "function": {"name": name}} if name is not None else choice
        plan = plan_tool_call(tools, forced, sim.faults.tool_call) if tools and choice != "none" else None
        no_tool = bool(tools) and choice in (None, "auto") and plan is None
        if no_tool and not self.legacy:
            # The model picked `no_tool`: since 3.2 TGI re-runs the whole generation without tools.
            base = sim.faults.ttft_ms if sim.faults.ttft_ms is not None else self.opts.ttft_ms
            sim.faults = dataclasses.replace(sim.faults, ttft_ms=2 * base)
        refused = await self._openai_refusal(request, sim, body, stream, body.get("response_format"))
        if refused is not None:
            return refused
        fixed = None
        if plan is not None:  # the grammar's JSON: 3.1 streams it raw, 3.3 parses it and sends its "{" first
            raw = (
                f'{{"function": {{"_name": "{plan.name}", {plan.arguments_json[1:]}}}'
                if plan.arguments
                else f'{{"function": {{"_name": "{plan.name}"}}}}'
            )
            fixed = fragments(raw) if self.legacy and stream else fragments(plan.arguments_json[1:])
        reply = TgiChat(sim, self.failures, int(time.time()), model, self.fingerprint, body, plan, self.legacy, no_tool)
        return await self.run_generation(request, sim, reply, stream, fixed)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._openai_body(request, "completion")
        if isinstance(body, web.Response):
            return body
        sim = self._openai_request(body, "completion")
        stream = bool(body.get("stream"))
        refused = await self._openai_refusal(request, sim, body, stream)
        if refused is not None:
            return refused
        reply = TgiCompletion(sim, self.failures, int(time.time()), self.opts.model_name, self.fingerprint)
        return await self.run_generation(request, sim, reply, stream)

    # ---- native API -----------------------------------------------------------------------

    async def compat(self, request: web.Request) -> web.StreamResponse:
        """`POST /`: `/generate_stream` when the body asks to stream, else `/generate`'s answer in a list."""
        response = await self._native(request, stream=None)
        if isinstance(response, web.Response) and response.status == 200 and isinstance(response.body, bytes):
            return web.Response(status=200, body=b"[" + response.body + b"]", content_type="application/json")
        return response

    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await self._native(request, stream=False)

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._native(request, stream=True)

    async def _native(self, request: web.Request, stream: bool | None) -> web.StreamResponse:
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        if stream is None:
            stream = bool(body.get("stream"))
        inputs = body.get("inputs")
        if not isinstance(inputs, str):
            return rejection("missing field `inputs` at line 1 column 2")
        params = object_field(body, "parameters")
        if params.get("grammar") is not None:
            rejected = grammar_rejection("parameters.grammar", params["grammar"])
            if rejected is not None:
                return rejected
        stop = params.get("stop")
        if stop is not None and not isinstance(stop, list):
            return rejection("parameters.stop: invalid type: string, expected a sequence at line 1 column 2")
        self.request_count += 1
        sim = SimRequest(
            request_id=f"tgi-native-{self.request_count}",
            kind="generate",
            prompt_words=prompt_words_completion(inputs),
            prompt_text=inputs,
            max_tokens=int_or_none(params.get("max_new_tokens")),
            stop=[s for s in (stop or []) if isinstance(s, str)],
            seed=int_or_none(params.get("seed")),
            faults=self.faults([inputs], body),
        )
        self.retokenize(sim)
        try:
            if stream and (params.get("best_of") or 1) != 1:
                message = "Input validation error: `best_of` != 1 is not supported when streaming tokens"
                raise TgiError(422, message, "validation")
            self._admit_and_check(sim, params, params.get("grammar"))
        except TgiError as err:
            self.failures.count(err.error_type)
            if not stream:
                return err.response()
            return await error_stream(request, [err.native_event()], STREAM_HEADERS)
        reply = TgiNative(
            sim, self.failures, inputs if params.get("return_full_text") else "", bool(params.get("details"))
        )
        return await self.run_generation(request, sim, reply, stream)
