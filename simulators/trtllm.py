"""A wire-faithful TensorRT-LLM `trtllm-serve` double (docs/runtimes.md §3 and §6).

Reproduced: connections refused while loading; `/health` 200 empty,
`/health_generate` 200 "Generation health check OK", `/version`, `/v1/models`
(`owned_by: "tensorrt_llm"`); JSON `/metrics` as a list of iteration stats that
each read drains; Prometheus `/prometheus/metrics` only with
`--return-perf-metrics`; `extra="forbid"` on every request model: an undeclared
field (`parallel_tool_calls`, `store`, `metadata`, ...) or a missing `model` gets
400 `{"error":"<validation text>"}` with a *string* `error`; flat
`{"object":"error",...}` 400s for nearly everything else, including generation
failures; the context errors worded "The sum of prompt length (N.0), query length
(0) should not exceed max_num_tokens (M)" (with `--max-num-tokens`) and, beyond
`--max-model-len`, "This model's maximum context length is L tokens. ..." with
`code: "context_length_exceeded"` (newer main); `model` echoed; non-stream ids
`chatcmpl-<32 hex>`, stream ids `chatcmpl-<int>` constant in one stream; the role
frame `data: {...} \\n\\n` with a trailing space and no `content`; no nulls in chat
chunks; `"reasoning_content":""` on every content delta; usage whenever
`stream_options` is present (even `{}`) with `prompt_tokens_details.cached_tokens`
always; tool deltas repeating `"type":"function"`; `finish_reason:"tool_calls"`
also for a named tool choice; a chat stream failure cuts the connection without
`[DONE]` while a completions stream failure sends an error event and `[DONE]`;
disconnects noticed by a 1-second poll; guided decoding from `response_format`
(`json` with `schema`, `json_schema` with OpenAI's wrapper or a bare schema,
`json_object`, `regex`, `ebnf`), a missing payload a flat 400, a malformed
`response_format` a validation 400.

Version note: the newest TRT-LLM main declares `parallel_tool_calls` on chat
requests; the 2026 build docs/runtimes.md describes rejects it, which is the default
here. The simulator's own `sim_fault` field is the one undeclared field it accepts.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import deque
from typing import Any

from aiohttp import web

from simulators.driver import Outcome
from simulators.promtext import Exposition
from simulators.request import SimRequest, texts_of
from simulators.server import Simulator, json_response
from simulators.structured_requests import ConstraintRefused, trtllm_constraint
from simulators.toolcalls import fragments, plan_tool_call
from simulators.trtllm_validation import json_decode_error, validate, validation_error
from simulators.trtllm_wire import TrtllmChat, TrtllmCompletion, flat_error

# The latency histograms' names and help texts, as the runtime writes them.
LATENCY = (
    ("trtllm_time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    ("trtllm_time_per_output_token_seconds", "Histogram of time per output token in seconds."),
    ("trtllm_e2e_request_latency_seconds", "Histogram of end to end request latency in seconds."),
)

VERSION = "1.3.0rc0"
ITER_STATS_MAX = 1000


class TrtllmSimulator(Simulator):
    kind = "trtllm"
    default_disconnect_abort_delay = 1.0  # await_disconnected() polls once a second

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executor_ids = itertools.count(1)
        self.iter_stats: deque[dict[str, Any]] = deque(maxlen=ITER_STATS_MAX)
        self.iteration = 0
        self.completed_since_stat = 0
        self.max_num_tokens = self.opts.max_num_tokens or self.opts.max_model_len
        self.labels = {"model_name": self.opts.model_name, "engine_type": "trtllm"}

    def add_routes(self, router: web.UrlDispatcher) -> None:
        self.add_openai_routes(router)
        router.add_get("/v1/models", self.models)
        router.add_get("/health", self.health)
        router.add_get("/health_generate", self.health_generate)
        router.add_get("/version", self.version)
        router.add_get("/metrics", self.metrics_json)
        router.add_post("/_internal/tokenize", self.tokenize)
        if self.opts.return_perf_metrics:
            router.add_get("/prometheus/metrics", self.metrics_prometheus)

    async def on_bound(self) -> None:
        await super().on_bound()
        self.spawn(self._iteration_ticker())

    # ---- small endpoints ----------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def health_generate(self, request: web.Request) -> web.Response:
        return web.Response(status=200, text="Generation health check OK")

    async def version(self, request: web.Request) -> web.Response:
        return json_response(200, {"version": VERSION})

    async def models(self, request: web.Request) -> web.Response:
        name = os.path.basename(self.opts.model_dir.rstrip("/")) if self.opts.model_dir else self.opts.model_name
        return json_response(
            200,
            {
                "object": "list",
                "data": [{"id": name, "object": "model", "created": int(self.created_at), "owned_by": "tensorrt_llm"}],
            },
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        body, _ = await self.read_body(request)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str):
            return validation_error([{"type": "missing", "loc": ("body", "prompt"), "msg": "Field required"}])
        tokens = self.tokenizer.encode(prompt, add_special_tokens=True)
        return json_response(200, {"count": len(tokens), "tokens": tokens})

    # ---- load signals -----------------------------------------------------------------

    def _stat(self) -> dict[str, Any]:
        self.iteration += 1
        tokens_per_block = 32
        max_blocks = self.opts.max_model_len * 16 // tokens_per_block
        used_blocks = min(max_blocks, self.live_tokens // tokens_per_block)
        completed, self.completed_since_stat = self.completed_since_stat, 0
        return {
            "iter": self.iteration,
            "iterLatencyMS": max(self.opts.itl_ms, 0.1),
            "numActiveRequests": self.running,
            "numQueuedRequests": self.waiting,
            "numCompletedRequests": completed,
            "maxNumActiveRequests": 256,
            "gpuMemUsage": 0,
            "cpuMemUsage": 0,
            "pinnedMemUsage": 0,
            "maxBatchSizeStatic": 256,
            "maxBatchSizeRuntime": 256,
            "maxNumTokensRuntime": self.max_num_tokens,
            "kvCacheStats": {
                "maxNumBlocks": max_blocks,
                "freeNumBlocks": max_blocks - used_blocks,
                "usedNumBlocks": used_blocks,
                "tokensPerBlock": tokens_per_block,
                "allocTotalBlocks": used_blocks,
                "allocNewBlocks": used_blocks,
                "reusedBlocks": self.prefix_cache.hits // tokens_per_block,
                "missedBlocks": (self.prefix_cache.queries - self.prefix_cache.hits) // tokens_per_block,
                "cacheHitRate": self.prefix_cache.hit_rate,
            },
            "inflightBatchingStats": {
                "numContextRequests": 0,
                "numGenRequests": self.running,
                "numPausedRequests": 0,
                "numScheduledRequests": self.running,
                "numCtxTokens": 0,
                "avgNumDecodedTokensPerIter": 1.0,
            },
        }

    async def _iteration_ticker(self) -> None:
        """The engine only iterates while it has work: one stats entry per tick then."""
        while True:
            await asyncio.sleep(0.05)
            if self.in_flight > 0:
                self.iter_stats.append(self._stat())

    async def metrics_json(self, request: web.Request) -> web.Response:
        drained = list(self.iter_stats)
        self.iter_stats.clear()
        return json_response(200, drained)

    async def metrics_prometheus(self, request: web.Request) -> web.Response:
        ex = Exposition(self.labels)
        stat = self._stat()
        self.iteration -= 1  # a scrape is not an engine iteration
        kv = stat["kvCacheStats"]
        ex.gauge("trtllm_num_requests_running", "Number of requests currently running.", self.running)
        ex.gauge("trtllm_num_requests_waiting", "Number of requests waiting.", self.waiting)
        ex.gauge(
            "trtllm_kv_cache_utilization",
            "KV cache utilization.",
            kv["usedNumBlocks"] / kv["maxNumBlocks"] if kv["maxNumBlocks"] else 0.0,
        )
        ex.gauge("trtllm_kv_cache_hit_rate", "KV cache hit rate.", kv["cacheHitRate"])
        ex.gauge("trtllm_kv_cache_used_blocks", "Used KV cache blocks.", kv["usedNumBlocks"])
        ex.gauge("trtllm_kv_cache_free_blocks", "Free KV cache blocks.", kv["freeNumBlocks"])
        ex.gauge("trtllm_kv_cache_max_blocks", "Max KV cache blocks.", kv["maxNumBlocks"])
        ex.counter(
            "trtllm_request_success",
            "Count of successfully processed requests.",
            {(("finished_reason", r),): float(n) for r, n in self.recorder.openai_finish_counts().items()},
        )
        ex.counter("trtllm_prompt_tokens", "Number of prefill tokens processed.", self.recorder.prompt_tokens_total)
        ex.counter(
            "trtllm_generation_tokens", "Number of generation tokens processed.", self.recorder.generation_tokens_total
        )
        return self.metrics_response(ex, LATENCY)

    def end_generation(self, sim: SimRequest, outcome: Outcome) -> None:
        super().end_generation(sim, outcome)
        self.completed_since_stat += 1
        self.iter_stats.append(self._stat())

    def disconnect_delay_for(self, request_id: str) -> float:
        """The poll fires on whole seconds since the request began."""
        live = self.live.get(request_id)
        if live is None or self.disconnect_abort_delay <= 0:
            return self.disconnect_abort_delay
        elapsed = time.monotonic() - live.started
        return self.disconnect_abort_delay - (elapsed % self.disconnect_abort_delay)

    # ---- OpenAI endpoints ------------------------------------------------------------

    async def openai_endpoint(self, request: web.Request, kind: str) -> web.StreamResponse:
        body, bad = await self.read_body(request)
        if bad is not None:
            return json_decode_error(bad)
        problem = validate(body, kind)
        if problem is not None:
            return problem
        stream = bool(body.get("stream"))
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        rid = f"{prefix}{next(self.executor_ids)}" if stream else f"{prefix}{os.urandom(16).hex()}"
        sim = self.sim_request(body, kind, rid, self.faults(texts_of(body, kind), body))
        try:
            sim.constraint = trtllm_constraint(body)
        except ConstraintRefused as exc:  # a ValueError in to_sampling_params: the handler's flat 400
            return flat_error(400, exc.message)
        if sim.faults.status is not None and sim.faults.status >= 400:
            return flat_error(sim.faults.status, f"Simulated failure with status {sim.faults.status}")
        if self.opts.max_num_tokens is not None and sim.context_tokens > self.opts.max_num_tokens:
            return flat_error(
                400,
                f"The sum of prompt length ({float(sim.context_tokens)}), query length (0) "
                f"should not exceed max_num_tokens ({self.max_num_tokens})",
            )
        if sim.context_tokens > self.opts.max_model_len:  # newer main's _deduce_max_tokens, OpenAI's words
            return flat_error(
                400,
                f"This model's maximum context length is {self.opts.max_model_len} tokens. However, your "
                f"messages resulted in {sim.context_tokens} tokens. Please reduce the length of the messages.",
                code="context_length_exceeded",
            )
        cached = self.cached_tokens(sim)
        if kind == "completion":
            return await self.run_generation(request, sim, TrtllmCompletion(body, sim, cached), stream)
        call = plan_tool_call(body.get("tools"), body.get("tool_choice"), sim.faults.tool_call)
        parsed = call if self.opts.tool_call_parser else None
        fixed = None
        if call is not None:  # without a parser the model's tool markup is the answer's text
            markup = f'<tool_call>{{"name": "{call.name}", "arguments": {call.arguments_json}}}</tool_call>'
            fixed = fragments(call.arguments_json if parsed is not None else markup)
        return await self.run_generation(request, sim, TrtllmChat(body, sim, cached, parsed), stream, fixed)
