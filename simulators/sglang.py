"""A wire-faithful SGLang 0.5.23 `launch_server` double (docs/runtimes.md §2 and §6).

Reproduced: connections refused while loading; after binding, `/health` and
`/health_generate` answer 503 during warm-up (`--warmup-delay`), then 200 with an
empty body after about one second (SGLang submits a probe generation and polls it
once a second; `--health-latency`); `/ready`, `/model_info`, `/server_info`,
`/v1/models`, JSON `/v1/loads`; Prometheus `/metrics` only with
`--enable-metrics`; bare 32-hex ids (or the client's `rid`); `model` echoed,
default `"default"`, never a 404 (with `--check-model-name`, as newer main: a 400
for a model other than the served name); msgspec-style content chunks
(`reasoning_content:null` first in `delta`, `matched_stop` always present, no
`usage` key) with `finish_reason` in a separate content-free chunk; the usage chunk
with a top-level `reasoning_tokens`; pydantic-style tool-call chunks with every
null key (`"usage":null`, `id:null`, `name:null`, repeated `type`); tool output as
raw text without `--tool-call-parser`; flat errors `{"object":"error",...}`;
queue-full answers (503 `type:"503"`, or SSE `SERVICE_UNAVAILABLE` in a stream);
`POST /abort_request` with `rid` (the stream ends with `finish_reason:"abort"`);
a client disconnect is noticed only 2 s later; native `/generate` with cumulative
streamed `text`; guided decoding from `response_format` (`json_schema` with its
`schema`, `json_object`), the top-level `regex` and `ebnf` (and `json_schema` on
completions), at most one of them. `/v1/tokenize`, `/v1/detokenize` and
`/v1/embeddings` (`--is-embedding`): simulators/sglang_tokens.py.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time
from functools import partial
from typing import Any

from aiohttp import web

from simulators import sglang_tokens
from simulators.faults import NO_FAULTS
from simulators.prefix_cache import radix_cache
from simulators.promtext import Exposition
from simulators.request import SimRequest, int_or_none, object_field, prompt_words_completion, stop_list, texts_of
from simulators.server import Simulator, json_response, prometheus_response
from simulators.sglang_wire import (
    SglangChat,
    SglangCompletion,
    SglangNative,
    SglangReply,
    error,
    flat_error,
    missing_field_message,
)
from simulators.sse import DONE_FRAME, error_stream, frame
from simulators.structured_requests import ConstraintRefused, sglang_constraint
from simulators.toolcalls import fragments, named_choice, plan_tool_call, tool_names
from simulators.validation import check_body, pydantic_text

# The latency histograms' names and help texts, as the runtime writes them.
LATENCY = (
    ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds"),
)

VERSION = "0.5.23"
_STATUS_NAMES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    429: "TOO_MANY_REQUESTS",
    500: "INTERNAL_SERVER_ERROR",
    503: "SERVICE_UNAVAILABLE",
}


class SglangSimulator(Simulator):
    kind = "sglang"
    default_disconnect_abort_delay = 2.0  # create_abort_task sleeps 2 s before aborting

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefix_cache = radix_cache()
        self.labels = {
            "model_name": self.opts.model_name,
            "engine_type": "unified",
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }

    def add_routes(self, router: web.UrlDispatcher) -> None:
        self.add_openai_routes(router)
        router.add_route("POST", "/generate", self.generate)
        router.add_route("PUT", "/generate", self.generate)
        router.add_post("/abort_request", self.abort_request)
        router.add_get("/health", self.health)
        router.add_get("/health_generate", self.health)
        router.add_get("/ready", self.ready)
        router.add_get("/model_info", self.model_info)
        router.add_get("/get_model_info", self.model_info)
        router.add_get("/server_info", self.server_info)
        router.add_get("/get_server_info", self.server_info)
        router.add_get("/v1/models", self.models)
        router.add_get("/v1/models/{model}", self.model_card)
        router.add_get("/v1/loads", self.loads)
        router.add_route("*", "/flush_cache", self.flush_cache)
        for path, handler in (
            ("tokenize", sglang_tokens.tokenize),
            ("detokenize", sglang_tokens.detokenize),
            ("embeddings", sglang_tokens.embeddings),
        ):
            router.add_post(f"/v1/{path}", partial(handler, self))
            if path != "embeddings":
                router.add_post(f"/{path}", partial(handler, self))
        if self.opts.enable_metrics:
            router.add_get("/metrics", self.metrics)

    def auth_required(self, path: str, method: str) -> bool:
        return not (path.startswith("/_sim/") or path in ("/health", "/health_generate", "/metrics"))

    # ---- readiness -------------------------------------------------------------

    @property
    def warming_up(self) -> bool:
        return self.ready_at is None or time.monotonic() - self.ready_at < self.opts.warmup_delay

    async def health(self, request: web.Request) -> web.Response:
        if self.warming_up:
            return web.Response(status=503)
        # The probe generation is polled once a second: never faster than that.
        await asyncio.sleep(self.opts.health_latency)
        return web.Response(status=200)

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self.warming_up else 200)

    async def flush_cache(self, request: web.Request) -> web.Response:
        self.prefix_cache = radix_cache()
        return web.Response(
            status=200,
            text="Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation "
            "will not be performed.)\n",
        )

    # ---- info ------------------------------------------------------------------

    async def model_info(self, request: web.Request) -> web.Response:
        return json_response(
            200,
            {
                "model_path": self.opts.model_dir or self.opts.model_name,
                "served_model_name": self.opts.model_name,
                "tokenizer_path": self.opts.model_dir or self.opts.model_name,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "load_format": "auto",
                "reasoning_parser": None,
                "tool_call_parser": self.opts.tool_call_parser,
            },
        )

    async def server_info(self, request: web.Request) -> web.Response:
        return json_response(
            200,
            {
                "model_path": self.opts.model_dir or self.opts.model_name,
                "served_model_name": self.opts.model_name,
                "port": request.url.port,
                "context_length": self.opts.max_model_len,
                "tool_call_parser": self.opts.tool_call_parser,
                "enable_metrics": self.opts.enable_metrics,
                "enable_cache_report": self.opts.enable_cache_report,
                "internal_states": [{"last_gen_throughput": 0.0}],
                "version": VERSION,
            },
        )

    def _card(self) -> dict[str, Any]:
        return {
            "id": self.opts.model_name,
            "object": "model",
            "created": int(self.created_at),
            "owned_by": "sglang",
            "root": self.opts.model_dir or self.opts.model_name,
            "parent": None,
            "max_model_len": self.opts.max_model_len,
        }

    async def models(self, request: web.Request) -> web.Response:
        return json_response(200, {"object": "list", "data": [self._card()]})

    async def model_card(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.opts.model_name:
            return error(404, f"The model '{name}' does not exist", "NotFoundError")
        return json_response(200, self._card())

    def _max_total_tokens(self) -> int:
        return self.opts.max_model_len * 16

    def _load_snapshot(self) -> dict[str, Any]:
        """One DP rank's `LoadSnapshot` (`srt/managers/load_snapshot.py`): core keys, then sections."""
        used = self.live_tokens
        total = self._max_total_tokens()
        return {
            "dp_rank": 0,
            "num_running_reqs": self.running,
            "num_waiting_reqs": self.waiting,
            "num_waiting_uncached_tokens": 0,
            "num_used_tokens": used,
            "num_total_tokens": used,
            "max_total_num_tokens": total,
            "max_running_requests": 4096,
            "token_usage": round(used / total, 4) if total else 0.0,
            "gen_throughput": 0.0,
            "cache_hit_rate": round(self.prefix_cache.hit_rate, 4),
            "utilization": round(min(1.0, used / total), 4) if total else 0.0,
            "memory": {"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0, "token_capacity": total},
            "queues": {"waiting": self.waiting, "grammar": 0, "paused": 0, "retracted": 0},
        }

    async def loads(self, request: web.Request) -> web.Response:
        include = request.query.get("include")
        wanted = {part.strip() for part in include.split(",")} if include else None
        valid = {"core", "memory", "spec", "lora", "disagg", "queues", "all"}
        if wanted is not None and not wanted <= valid:
            return json_response(
                400, {"detail": f"Invalid include sections: {wanted - valid}. Valid options: {sorted(valid)}"}
            )
        load = self._load_snapshot()
        for section in ("memory", "queues"):
            if wanted is not None and "all" not in wanted and section not in wanted:
                load.pop(section)
        if request.query.get("format") == "prometheus":
            lines = []
            for key, value in load.items():
                if key == "dp_rank":
                    continue
                items = (
                    [(f"sglang_{key}_{k}", v) for k, v in value.items()]
                    if isinstance(value, dict)
                    else [(f"sglang_{key}", value)]
                )
                for name, number in items:
                    lines += [f"# TYPE {name} gauge", f'{name}{{dp_rank="0"}} {number}']
            return prometheus_response("\n".join(lines) + "\n")
        return json_response(
            200,
            {
                "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
                "version": VERSION,
                "accelerator": None,
                "num_accelerators": 1,
                "loads": [load],
            },
        )

    async def metrics(self, request: web.Request) -> web.Response:
        ex = Exposition(self.labels)
        total = self._max_total_tokens()
        used = self.live_tokens
        ex.gauge("sglang:num_running_reqs", "The number of running requests.", self.running)
        ex.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", self.waiting)
        ex.gauge("sglang:token_usage", "The token usage.", used / total if total else 0.0)
        ex.gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", self.prefix_cache.hit_rate)
        ex.gauge("sglang:gen_throughput", "The generation throughput (token/s).", 0.0)
        ex.gauge("sglang:num_used_tokens", "The number of used tokens.", used)
        ex.gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", total)
        ex.counter("sglang:prompt_tokens", "Number of prefill tokens processed.", self.recorder.prompt_tokens_total)
        ex.counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", self.recorder.generation_tokens_total
        )
        ex.counter("sglang:cached_tokens", "Number of cached prompt tokens.", self.prefix_cache.hits)
        ex.counter("sglang:num_requests", "The number of processed requests.", self.recorder.completed)
        ex.counter("sglang:num_aborted_requests", "Number of requests aborted.", self.recorder.aborted)
        return self.metrics_response(ex, LATENCY)

    # ---- abort ------------------------------------------------------------------

    async def abort_request(self, request: web.Request) -> web.Response:
        body, _ = await self.read_body(request)
        body = body if isinstance(body, dict) else {}
        targets = list(self.generations) if body.get("abort_all") else [str(body.get("rid", ""))]
        for rid in targets:
            gen = self.generations.get(rid)
            if gen is not None:
                gen.abort()
            # A request whose client already left is still live in SGLang until its
            # 2 s disconnect check runs; an explicit abort before that is what ends it.
            if gen is not None or rid in self.recorder.live:
                self.recorder.abort(rid, "abort_request")
        return web.Response(status=200)

    # ---- validation ----------------------------------------------------------------

    def _validate(self, body: Any, kind: str) -> web.Response | None:
        if not isinstance(body, dict):
            return error(
                400,
                "1 validation error for ChatCompletionRequest\n  Input should be a valid dictionary [type=model_type]",
                "Bad Request",
            )
        field_name = "messages" if kind == "chat" else "prompt"
        if body.get(field_name) is None or (kind == "chat" and not isinstance(body[field_name], list)):
            return error(400, missing_field_message(body, kind, field_name), "Bad Request")
        problems = check_body(body, kind)
        if problems:  # the validation handler: str(exc) + str(exc.errors())
            model = "ChatCompletionRequest" if kind == "chat" else "CompletionRequest"
            return error(400, pydantic_text(problems, model) + str([p.as_pydantic() for p in problems]), "Bad Request")
        if kind == "chat":
            tools = body.get("tools")
            choice = body.get("tool_choice")
            tool = named_choice(choice)
            if (choice == "required" or tool is not None) and not tools:
                return error(400, "Tools cannot be empty if tool choice is set to required.")
            if tool is not None and tool not in tool_names(tools or []):
                return error(400, f"Tool '{tool}' not found in tools list.")
            # serving_chat.py `_validate_request`, before the prompt is tokenized, so it
            # comes before the context checks (SGLang's test_max_tokens_validation);
            # the missing space after the period is SGLang's.
            wanted = body.get("max_completion_tokens") or body.get("max_tokens")
            if isinstance(wanted, int) and wanted > self.opts.max_model_len:
                return error(
                    400,
                    f"max_completion_tokens is too large: {wanted}."
                    f"This model supports at most {self.opts.max_model_len} completion tokens.",
                )
        if self.opts.check_model_name:
            refused = self._unknown_model(body.get("model"))
            if refused is not None:
                return refused
        return None

    def _unknown_model(self, model: Any) -> web.Response | None:
        """Newer SGLang main refuses a model other than the served name (a LoRA
        `served:adapter` passes); 0.5.23 echoes any. SGLang's test asserts the two
        sentences, not how they are joined."""
        served = self.opts.model_name
        if model is None or model == served or (isinstance(model, str) and model.startswith(served + ":")):
            return None
        return error(400, f"The model `{model}` does not exist. The served model name is `{served}`.")

    def _context_message(self, sim: SimRequest) -> str | None:
        limit = self.opts.max_model_len
        if sim.context_tokens >= limit:
            return (
                f"The input ({sim.context_tokens} tokens) is longer than the model's context length ({limit} tokens)."
            )
        if sim.max_tokens is not None and sim.context_tokens + sim.max_tokens > limit:
            total = sim.context_tokens + sim.max_tokens
            return (
                f"Requested token count exceeds the model's maximum context length of {limit} "
                f"tokens. You requested a total of {total} tokens: {sim.context_tokens} tokens from "
                f"the input messages and {sim.max_tokens} tokens for the completion. Please reduce "
                f"the number of tokens in the input messages or the completion to fit within the limit."
            )
        return None

    def _queue_full(self) -> bool:
        limit = self.opts.max_queued_requests
        return limit is not None and self.waiting >= limit

    # ---- OpenAI endpoints ------------------------------------------------------------

    async def openai_endpoint(self, request: web.Request, kind: str) -> web.StreamResponse:
        body, bad = await self.read_body(request)
        if bad is not None:
            return error(400, f"JSON decode error: {bad}", "Bad Request")
        problem = self._validate(body, kind)
        if problem is not None:
            return problem
        try:
            constraint = sglang_constraint(body, kind)
        except ConstraintRefused as exc:
            return error(400, exc.message)
        rid = str(body.get("rid") or os.urandom(16).hex())
        sim = self.sim_request(body, kind, rid, self.faults(texts_of(body, kind), body))
        sim.constraint = constraint
        faults = sim.faults
        stream = bool(body.get("stream"))
        if faults.status is not None and faults.status >= 400:
            status_name = _STATUS_NAMES.get(faults.status, "BadRequestError")
            return error(faults.status, f"Simulated failure with status {faults.status}", status_name)
        overloaded = faults.overloaded or self._queue_full()
        if overloaded and not stream:
            return error(503, "The request queue is full.", "503")
        too_long = self._context_message(sim)
        if too_long is not None:
            return error(400, too_long)
        plan = plan_tool_call(body.get("tools"), body.get("tool_choice"), faults.tool_call) if kind == "chat" else None
        parsed = plan is not None and bool(self.opts.tool_call_parser)
        fixed = None
        if plan is not None:  # without a parser the model's tool markup is the answer's text
            markup = f'<tool_call>\n{{"name": "{plan.name}", "arguments": {plan.arguments_json}}}\n</tool_call>'
            fixed = fragments(plan.arguments_json if parsed else markup)
        cached = self.cached_tokens(sim)
        model = body.get("model") or "default"
        if overloaded:
            queue_full = frame({"error": flat_error("The request queue is full.", "SERVICE_UNAVAILABLE", 503)})
            return await error_stream(request, [queue_full, DONE_FRAME])
        reply: SglangReply
        if kind == "chat":
            reply = SglangChat(self.opts, body, sim, cached, model, plan if parsed else None)
        else:
            reply = SglangCompletion(self.opts, body, sim, cached, model)
        return await self.run_generation(request, sim, reply, stream, fixed)

    # ---- native /generate ----------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body, bad = await self.read_body(request)
        if bad is not None or not isinstance(body, dict):
            return json_response(400, {"error": {"message": f"JSON decode error: {bad}"}})
        text = body.get("text")
        ids = body.get("input_ids")
        if text is None and ids is None:
            return json_response(400, {"error": {"message": "Either text or input_ids should be provided."}})
        params = object_field(body, "sampling_params")
        words = prompt_words_completion(ids if ids is not None else text)
        faults = self.faults([text] if isinstance(text, str) else [], body) if text is not None else NO_FAULTS
        sim = SimRequest(
            request_id=str(body.get("rid") or os.urandom(16).hex()),
            kind="generate",
            prompt_words=words,
            prompt_text=text if isinstance(text, str) else " ".join(words),
            max_tokens=int_or_none(params.get("max_new_tokens")) or 128,
            ignore_eos=bool(params.get("ignore_eos", False)),
            stop=stop_list(params.get("stop")),
            seed=int_or_none(params.get("sampling_seed")),
            faults=faults,
        )
        if ids is None:
            self.retokenize(sim)
        try:
            sim.constraint = sglang_constraint(params, "completion")
        except ConstraintRefused as exc:
            return json_response(400, {"error": {"message": exc.message}})
        too_long = self._context_message(sim)
        if too_long is not None:
            return json_response(400, {"error": {"message": too_long}})
        reply = SglangNative(sim, self.cached_tokens(sim))
        return await self.run_generation(request, sim, reply, bool(body.get("stream")))
