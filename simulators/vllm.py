"""A wire-faithful vLLM 0.33 `vllm serve` double (docs/runtimes.md §1 and §6).

Reproduced: connections refused while loading, then `/health` 200 with an empty
body; `/ping`, `/version`, `/load`, `/v1/models` (`owned_by: "vllm"`,
`max_model_len`); Prometheus `/metrics` with `vllm:*` names and
`model_name`/`engine` labels; nested errors with an integer `code`; 404 on an
unknown model; `max_tokens` silently clamped to the context; the role chunk with
`"content":""` and `prompt_token_ids`/`prompt_text` nulls; `finish_reason` on the
last content chunk with `stop_reason`; the usage chunk with `choices: []` and keys
ordered `prompt_tokens, total_tokens, completion_tokens`; `data: [DONE]` even after
an in-stream error; `chatcmpl-<16 hex>` ids (or the `X-Request-Id` header);
hermes-style tool-call deltas with `chatcmpl-tool-<16 hex>` ids, `finish_reason`
`"stop"` for a named tool choice; `abort`/`repetition` finish reasons; tool choice
`auto` refused without `--enable-auto-tool-choice --tool-call-parser`; guided
decoding from `response_format` (`json_schema`, `json_object`) or
`structured_outputs` (`json`, `regex`, `choice`, `grammar`, `json_object`; exactly
one), with vLLM's refusals as 400 "Bad Request". `/tokenize`, `/detokenize` and, with
`--runner pooling` (an embedding model, no generation routes), `/v1/embeddings`:
simulators/vllm_tokens.py. The prefix cache as vLLM's block pool with its block
hashes (`--num-gpu-blocks-override`), its KV-cache events over ZMQ
(`--kv-events-config`) and `/reset_prefix_cache`: vllm_kv_*.py; a modelled GPU that
prefills one prompt at a time (`--prefill-ms-per-token`): vllm_device.py.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import orjson
from aiohttp import web

from simulators import vllm_tokens
from simulators.promtext import Exposition
from simulators.request import SimRequest, texts_of, with_default_system
from simulators.server import Simulator, json_response
from simulators.structured_requests import ConstraintRefused, vllm_constraint
from simulators.tokens import Generation, SyntheticGeneration
from simulators.toolcalls import fragments, named_choice, plan_tool_call, tool_names
from simulators.validation import check_body, pydantic_text
from simulators.vllm_device import Device, DeviceGeneration
from simulators.vllm_kv_cache import VllmBlockCache
from simulators.vllm_kv_events import KVEventsConfig, ZmqEventPublisher
from simulators.vllm_wire import VllmChat, VllmCompletion, VllmReply, error

# The latency histograms' names and help texts, as the runtime writes them.
LATENCY = (
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
)

VERSION = "0.33.0"


class VllmSimulator(Simulator):
    kind = "vllm"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fingerprint = f"vllm-{VERSION}-{os.urandom(4).hex()}"
        self.labels = {"model_name": self.opts.model_name, "engine": "0"}
        opts = self.opts
        self.kv_events = KVEventsConfig.parse(opts.kv_events_config) if opts.kv_events_config else KVEventsConfig()
        self.publisher: ZmqEventPublisher | None = None
        # vLLM's paged prefix cache with its block hashes, bounded by --num-gpu-blocks-override.
        self.kv_cache = VllmBlockCache.from_override(opts.num_gpu_blocks_override, self._publish)
        self.prefix_cache = self.kv_cache  # type: ignore[assignment]
        modelled = opts.prefill_ms_per_token > 0 and opts.source == "synthetic"
        self.device: Device | None = Device() if modelled else None
        self.answered = 0  # requests that reached the fault check (error_every counts them)

    # ---- prefix cache, KV events, modelled device (vllm_kv_*.py, vllm_device.py) ----

    async def load(self) -> None:
        await super().load()
        if self.kv_events.publishes:  # bound before the HTTP port, as vLLM's engine starts first
            self.publisher = ZmqEventPublisher(self.kv_events)

    def make_app(self) -> web.Application:
        app = super().make_app()
        app.on_cleanup.append(self._close_publisher)
        return app

    async def _close_publisher(self, app: web.Application) -> None:
        if self.publisher is not None:
            await self.publisher.close()
            self.publisher = None

    def _publish(self, events: list[dict[str, Any]]) -> None:
        if self.publisher is not None:
            self.publisher.publish(events)

    def prompt_ids(self, sim: SimRequest) -> list[int]:
        """The ids the prefix cache hashes: the client's token ids, else the double's tokenizer's."""
        if sim.prompt_ids is not None:
            return sim.prompt_ids
        return [self._words.word_id(w) for w in sim.prompt_words]

    def cached_tokens(self, sim: SimRequest) -> int:
        if self.device is not None:
            return 0  # looked up when the request gets the device (vllm_device.py)
        return self.kv_cache.lookup_and_commit(self.prompt_ids(sim))

    def wrap_generation(self, gen: Generation, sim: SimRequest) -> Generation:
        if self.device is not None and isinstance(gen, SyntheticGeneration):
            return DeviceGeneration(gen, self, sim)
        return gen

    def paced(self, sim: SimRequest) -> bool:
        return self.device is not None or super().paced(sim)

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's `POST /reset_prefix_cache` (served by vLLM with VLLM_SERVER_DEV_MODE=1)."""
        self.kv_cache.reset()
        return web.Response(status=200)

    async def _stats(self, request: web.Request) -> web.Response:
        response = await super()._stats(request)
        snap = orjson.loads(response.body)  # type: ignore[arg-type]
        snap["kv_cache"] = {
            "blocks": self.kv_cache.used_blocks,
            "capacity": self.kv_cache.capacity,
            "evicted": self.kv_cache.evicted,
            "batches_published": self.publisher.seq if self.publisher is not None else 0,
        }
        return json_response(200, snap)

    def add_routes(self, router: web.UrlDispatcher) -> None:
        # Routes follow the model's tasks: generation, or embeddings (`--runner pooling`).
        if self.opts.runner == "pooling":
            router.add_post("/v1/embeddings", partial(vllm_tokens.embeddings, self))
        else:
            self.add_openai_routes(router)
        router.add_get("/v1/models", self.models)
        router.add_get("/health", self.health)
        router.add_route("*", "/ping", self.health)
        router.add_get("/version", self.version)
        router.add_get("/load", self.load_endpoint)
        router.add_get("/metrics", self.metrics)
        router.add_post("/tokenize", partial(vllm_tokens.tokenize, self))
        router.add_post("/detokenize", partial(vllm_tokens.detokenize, self))
        router.add_post("/reset_prefix_cache", self.reset_prefix_cache)

    # ---- small endpoints -----------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return json_response(200, {"version": VERSION})

    async def load_endpoint(self, request: web.Request) -> web.Response:
        return json_response(200, {"server_load": self.in_flight})

    def auth_required(self, path: str, method: str) -> bool:
        return path.startswith("/v1")  # vLLM's AuthenticationMiddleware guards /v1 routes only

    async def models(self, request: web.Request) -> web.Response:
        name = self.opts.model_name
        card = {
            "id": name,
            "object": "model",
            "created": int(self.created_at),
            "owned_by": "vllm",
            "root": self.opts.model_dir or name,
            "parent": None,
            "max_model_len": self.opts.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{os.urandom(8).hex()}",
                    "object": "model_permission",
                    "created": int(self.created_at),
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return json_response(200, {"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        ex = Exposition(self.labels)
        ex.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", self.running)
        ex.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", self.waiting)
        ex.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", self.kv_usage())
        ex.counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            self.prefix_cache.queries,
        )
        ex.counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", self.prefix_cache.hits
        )
        ex.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", self.recorder.prompt_tokens_total)
        ex.counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", self.recorder.generation_tokens_total
        )
        ex.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0)
        ex.counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            {(("finished_reason", r),): float(n) for r, n in self.recorder.openai_finish_counts().items()},
        )
        return self.metrics_response(ex, LATENCY)

    def kv_usage(self) -> float:
        blocks = self.opts.num_gpu_blocks_override  # the pool's size when given, less the null block
        capacity = (blocks - 1) * self.kv_cache.block_size if blocks else self.opts.max_model_len * 16
        live_tokens = self.live_tokens
        return min(1.0, live_tokens / capacity) if capacity else 0.0

    # ---- OpenAI endpoints ----------------------------------------------------

    def _request_id(self, request: web.Request, body: dict[str, Any], prefix: str) -> str:
        base = request.headers.get("X-Request-Id") or body.get("request_id") or os.urandom(8).hex()
        return f"{prefix}{base}"

    def _validate_common(self, request: web.Request, body: Any, kind: str) -> web.Response | None:
        if not isinstance(body, dict):
            return error(
                400,
                "1 validation error:\n  {'type': 'model_attributes_type', 'loc': ('body',), "
                "'msg': 'Input should be a valid dictionary or object to extract fields from'}",
                "Bad Request",
            )
        field_name = "messages" if kind == "chat" else "prompt"
        value = body.get(field_name)
        if value is None or (kind == "chat" and not isinstance(value, list)):
            return error(
                400,
                f"1 validation error:\n  {{'type': 'missing', 'loc': ('body', '{field_name}'), "
                f"'msg': 'Field required'}}",
                "Bad Request",
                field_name,
            )
        problems = check_body(body, kind)
        if problems:  # pydantic failures answer 400 with the dotted location as `param`
            return error(400, pydantic_text(problems), "Bad Request", problems[0].loc)
        model = body.get("model")
        if model is not None and model != self.opts.model_name:
            return error(
                404,
                f"The model `{model}` does not exist. Valid aliases: {self.opts.model_name}.",
                "NotFoundError",
                "model",
            )
        if body.get("stream_options") is not None and not body.get("stream"):
            return error(400, "Stream options can only be defined when `stream=True`.")
        return None

    def _validate_tools(self, body: dict[str, Any]) -> web.Response | None:
        tools = body.get("tools")
        choice = body.get("tool_choice")
        if tools is not None and (not isinstance(tools, list) or not tools):
            return error(
                400,
                "1 validation error:\n  Value error, `tools` must not be an empty list when specified.",
                "Bad Request",
                "tools",
            )
        if choice is not None and choice != "none" and not tools:
            return error(400, "When using `tool_choice`, `tools` must be set.")
        if tools:
            name = named_choice(choice)
            if name is not None and name not in tool_names(tools):
                return error(400, f"Tool '{name}' has not been passed in `tools`.")
            effective = "auto" if choice is None else choice
            if effective == "auto" and not (self.opts.enable_auto_tool_choice and self.opts.tool_call_parser):
                return error(
                    400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
                )
            if (effective == "required" or name is not None) and not self.opts.tool_call_parser:
                label = effective if name is None else "named"
                return error(400, f'tool_choice="{label}" requires --tool-call-parser to be set')
        return None

    def _context_check(self, sim: SimRequest) -> web.Response | None:
        limit = self.opts.max_model_len
        if sim.context_tokens == limit:  # no room left for a single output token (`get_max_tokens`)
            return error(400, f"Input length ({limit}) exceeds model's maximum context length ({limit}).")
        if sim.context_tokens > limit:
            # vLLM tokenizes text prompts truncated at limit + 1 tokens, so it can only say "at least"
            # (observed on live vLLM servers; docs/runtimes.md quotes a longer variant of the same sentence).
            return error(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains at least {limit + 1} input tokens.",
                param="input_tokens",
            )
        # 0.33 clamps an oversized max_tokens to what is left instead of failing.
        room = limit - sim.context_tokens
        sim.max_tokens = room if sim.max_tokens is None else min(sim.max_tokens, room)
        return None

    def _fault_response(self, sim: SimRequest) -> web.Response | None:
        f = sim.faults
        limit = self.opts.max_num_queued_reqs
        if f.overloaded or (limit is not None and self.waiting >= limit):
            if f.overload_status is not None:  # a broken runtime: not its own overload answer
                return error(f.overload_status, "Simulated failure under overload", "InternalServerError")
            return error(
                503,
                "The engine is currently busy and cannot accept new requests. Please try "
                "again later or on a different instance.",
                "Service Unavailable",
            )
        self.answered += 1
        if f.error_every and self.answered % f.error_every == 0:
            return error(500, "Simulated failure (error_every)", "InternalServerError")
        if f.status is not None and f.status >= 400:
            kind = {
                500: "InternalServerError",
                503: "ServiceUnavailableError",
                501: "NotImplementedError",
                404: "NotFoundError",
            }.get(f.status, "BadRequestError")
            return error(f.status, f"Simulated failure with status {f.status}", kind)
        return None

    async def openai_endpoint(self, request: web.Request, kind: str) -> web.StreamResponse:
        if request.content_type != "application/json":
            return error(400, "Unsupported Media Type: Only 'application/json' is allowed")
        body, bad = await self.read_body(request)
        if bad is not None:
            return error(400, f"JSON decode error: {bad}", "Bad Request")
        problem = self._validate_common(request, body, kind)
        if problem is None and kind == "chat":
            problem = self._validate_tools(body)
        if problem is not None:
            return problem
        try:
            constraint = vllm_constraint(body)
        except ConstraintRefused as exc:  # pydantic's validation of the request model
            return error(400, exc.message, "Bad Request", exc.param)
        if kind == "chat" and self.opts.default_system_prompt:
            body = {**body, "messages": with_default_system(body["messages"], self.opts.default_system_prompt)}
        rid = self._request_id(request, body, "chatcmpl-" if kind == "chat" else "cmpl-")
        sim = self.sim_request(body, kind, rid, self.faults(texts_of(body, kind), body))
        sim.constraint = constraint
        problem = self._fault_response(sim) or self._context_check(sim)
        if problem is not None:
            return problem
        cached = self.cached_tokens(sim)
        reply: VllmReply
        fixed = None
        if kind == "chat":
            plan = plan_tool_call(body.get("tools"), body.get("tool_choice"), sim.faults.tool_call)
            named = named_choice(body.get("tool_choice")) is not None
            reply = VllmChat(self.opts, self.fingerprint, body, sim, cached, plan, named)
            arguments = plan.arguments_json[:-1] if plan is not None and sim.faults.bad_tool_args else None
            fixed = fragments(arguments or plan.arguments_json) if plan is not None else None
        else:
            reply = VllmCompletion(self.opts, self.fingerprint, body, sim, cached)
        sim.reply = reply  # the modelled device sets its cached tokens
        return await self.run_generation(request, sim, reply, bool(body.get("stream")), fixed)
