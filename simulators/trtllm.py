"""A wire-faithful TensorRT-LLM `trtllm-serve` double (RUNTIMES.md sections 3 and 6).

Reproduced: connections refused while loading; `/health` 200 empty,
`/health_generate` 200 "Generation health check OK", `/version`, `/v1/models`
(`owned_by: "tensorrt_llm"`); JSON `/metrics` as a list of iteration stats that
each read drains; Prometheus `/prometheus/metrics` only with
`--return-perf-metrics`; `extra="forbid"` on every request model: an undeclared
field (`parallel_tool_calls`, `store`, `metadata`, ...) or a missing `model` gets
400 `{"error":"<validation text>"}` with a *string* `error`; flat
`{"object":"error",...}` 400s for nearly everything else, including generation
failures; the context error worded "The sum of prompt length (N.0), query length
(0) should not exceed max_num_tokens (M)"; `model` echoed; non-stream ids
`chatcmpl-<32 hex>`, stream ids `chatcmpl-<int>` constant in one stream; the role
frame `data: {...} \\n\\n` with a trailing space and no `content`; no nulls in chat
chunks; `"reasoning_content":""` on every content delta; usage whenever
`stream_options` is present (even `{}`) with `prompt_tokens_details.cached_tokens`
always; tool deltas repeating `"type":"function"`; `finish_reason:"tool_calls"`
also for a named tool choice; a chat stream failure cuts the connection without
`[DONE]` while a completions stream failure sends an error event and `[DONE]`;
disconnects noticed by a 1-second poll.

Version note: the newest TRT-LLM main declares `parallel_tool_calls` on chat
requests; the 2026 build RUNTIMES.md describes rejects it, which is the default
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

from simulators import logprobs
from simulators.driver import Outcome, StreamEnded, collect, pump
from simulators.faults import MAGIC_FIELD
from simulators.promtext import Exposition
from simulators.request import SimRequest, texts_of
from simulators.server import DONE_FRAME, Simulator, SSEStream, frame, json_response
from simulators.tokens import Token
from simulators.toolcalls import ToolCallPlan, fragments, plan_tool_call
from simulators.validation import check_body

VERSION = "1.3.0rc0"
ITER_STATS_MAX = 1000

_COMMON_FIELDS = {
    "model",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "n",
    "presence_penalty",
    "response_format",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "user",
    "best_of",
    "use_beam_search",
    "top_k",
    "top_p_min",
    "min_p",
    "repetition_penalty",
    "length_penalty",
    "early_stopping",
    "stop_token_ids",
    "include_stop_str_in_output",
    "ignore_eos",
    "min_tokens",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "truncate_prompt_tokens",
    "lora_request",
    "echo",
    "add_special_tokens",
    "disaggregated_params",
    "conversation_params",
    "priority",
    "prompt_ignore_length",
    "thinking_token_budget",
    MAGIC_FIELD,
}
CHAT_FIELDS = _COMMON_FIELDS | {
    "messages",
    "prompt_token_ids",
    "prompt_token_ids_b64",
    "top_logprobs",
    "max_completion_tokens",
    "max_tokens",
    "tools",
    "tool_choice",
    "reasoning_effort",
    "thinking",
    "add_generation_prompt",
    "documents",
    "chat_template",
    "chat_template_kwargs",
    "injected_chat_template_kwargs",
    "media_io_kwargs",
    "cache_salt",
    "agent_hierarchy",
    "mm_processor_kwargs",
}
COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt", "max_tokens", "suffix", "return_context_logits", "detokenize"}
STREAM_OPTION_FIELDS = {"include_usage", "continuous_usage_stats"}


def flat_error(status: int, message: str, type_: str = "BadRequestError") -> web.Response:
    return json_response(status, {"object": "error", "message": message, "type": type_, "param": None, "code": status})


def validation_error(problems: list[dict[str, Any]]) -> web.Response:
    """FastAPI's RequestValidationError, stringified into a bare string `error`."""
    return json_response(400, {"error": str(problems)})


def openai_finish(finish: str | None, tool_called: bool) -> str | None:
    if finish in ("eos", "stop_sequence"):
        return "tool_calls" if tool_called else "stop"
    return finish


class TrtllmSimulator(Simulator):
    kind = "trtllm"
    default_disconnect_abort_delay = 1.0  # await_disconnected() polls once a second

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executor_ids = itertools.count(1)
        self.iter_stats: deque[dict[str, Any]] = deque(maxlen=ITER_STATS_MAX)
        self.iteration = 0
        self.completed_since_stat = 0
        self.started_at: dict[str, float] = {}
        self.max_num_tokens = self.opts.max_num_tokens or self.opts.max_model_len
        self.labels = {"model_name": self.opts.model_name, "engine_type": "trtllm"}

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/chat/completions", self.chat)
        router.add_post("/v1/completions", self.completions)
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
        count = len(prompt.split())
        return json_response(200, {"count": count, "tokens": list(range(100, 100 + count))})

    # ---- load signals -----------------------------------------------------------------

    def _stat(self) -> dict[str, Any]:
        self.iteration += 1
        tokens_per_block = 32
        max_blocks = self.opts.max_model_len * 16 // tokens_per_block
        used_blocks = min(max_blocks, sum(self.live_prompt_tokens.values()) // tokens_per_block)
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
        ex.histogram(
            "trtllm_time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft_hist
        )
        ex.histogram(
            "trtllm_time_per_output_token_seconds", "Histogram of time per output token in seconds.", self.itl_hist
        )
        ex.histogram(
            "trtllm_e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", self.e2e_hist
        )
        return web.Response(
            status=200, body=ex.text().encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    def end_generation(self, sim: SimRequest, *args: Any, **kwargs: Any) -> None:
        super().end_generation(sim, *args, **kwargs)
        self.completed_since_stat += 1
        self.iter_stats.append(self._stat())

    def disconnect_delay_for(self, request_id: str) -> float:
        """The poll fires on whole seconds since the request began."""
        started = self.started_at.get(request_id)
        if started is None or self.disconnect_abort_delay <= 0:
            return self.disconnect_abort_delay
        elapsed = time.monotonic() - started
        return self.disconnect_abort_delay - (elapsed % self.disconnect_abort_delay)

    # ---- validation -----------------------------------------------------------------

    def _validate(self, body: Any, kind: str) -> web.Response | None:
        if not isinstance(body, dict):
            return validation_error(
                [
                    {
                        "type": "model_attributes_type",
                        "loc": ("body",),
                        "msg": "Input should be a valid dictionary or object to extract fields from",
                        "input": body,
                    }
                ]
            )
        allowed = CHAT_FIELDS if kind == "chat" else COMPLETION_FIELDS
        problems: list[dict[str, Any]] = []
        required = ("messages", "model") if kind == "chat" else ("model", "prompt")
        for name in required:
            if name not in body:
                problems.append({"type": "missing", "loc": ("body", name), "msg": "Field required", "input": body})
        for name, value in body.items():
            if name not in allowed:
                problems.append(
                    {
                        "type": "extra_forbidden",
                        "loc": ("body", name),
                        "msg": "Extra inputs are not permitted",
                        "input": value,
                    }
                )
        options = body.get("stream_options")
        if isinstance(options, dict):
            for name, value in options.items():
                if name not in STREAM_OPTION_FIELDS:
                    problems.append(
                        {
                            "type": "extra_forbidden",
                            "loc": ("body", "stream_options", name),
                            "msg": "Extra inputs are not permitted",
                            "input": value,
                        }
                    )
        problems += [p.as_pydantic() for p in check_body(body, kind)]
        if problems:
            return validation_error(problems)
        if options and not body.get("stream"):
            return validation_error(
                [
                    {
                        "type": "value_error",
                        "loc": ("body",),
                        "msg": "Value error, Stream options can only be defined when stream is true.",
                        "input": body,
                    }
                ]
            )
        if kind == "completion" and body.get("suffix"):
            return validation_error(
                [
                    {
                        "type": "value_error",
                        "loc": ("body",),
                        "msg": "Value error, suffix is not supported",
                        "input": body,
                    }
                ]
            )
        if kind == "chat":
            choice = body.get("tool_choice")
            if choice not in (None, "none") and not body.get("tools"):
                return flat_error(400, "When using `tool_choice`, `tools` must be set.")
        return None

    # ---- generation ---------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        body, bad = await self.read_body(request)
        if bad is not None:
            return validation_error(
                [
                    {
                        "type": "json_invalid",
                        "loc": ("body", 0),
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": bad},
                    }
                ]
            )
        problem = self._validate(body, kind)
        if problem is not None:
            return problem
        stream = bool(body.get("stream"))
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        rid = f"{prefix}{next(self.executor_ids)}" if stream else f"{prefix}{os.urandom(16).hex()}"
        sim = self.sim_request(body, kind, rid, self.faults(texts_of(body, kind), body))
        if sim.faults.status is not None and sim.faults.status >= 400:
            return flat_error(sim.faults.status, f"Simulated failure with status {sim.faults.status}")
        if sim.prompt_tokens > self.max_num_tokens:
            return flat_error(
                400,
                f"The sum of prompt length ({float(sim.prompt_tokens)}), query length (0) "
                f"should not exceed max_num_tokens ({self.max_num_tokens})",
            )
        plan = None
        if kind == "chat" and self.opts.tool_call_parser:
            plan = plan_tool_call(body.get("tools"), body.get("tool_choice"), sim.faults.tool_call)
        raw_tool = None
        if kind == "chat" and plan is None and not self.opts.tool_call_parser:
            unparsed = plan_tool_call(body.get("tools"), body.get("tool_choice"), sim.faults.tool_call)
            if unparsed is not None:  # no parser: the model's tool markup comes back as plain content
                raw_tool = fragments(
                    f'<tool_call>{{"name": "{unparsed.name}", "arguments": {unparsed.arguments_json}}}</tool_call>'
                )
        cached = self.cached_tokens(sim)
        fixed = fragments(plan.arguments_json) if plan is not None else raw_tool
        gen = self.start_generation(sim, request.path, fixed)
        self.live_prompt_tokens[rid] = sim.prompt_tokens
        self.started_at[rid] = time.monotonic()
        outcome = Outcome(n=max(1, sim.n))
        try:
            with self.watch_disconnect(sim):
                if stream:
                    return await self._stream(request, body, kind, sim, gen, outcome, plan, cached)
                await collect(gen, outcome)
                if sim.faults.error_after is not None:
                    self.fail_generation(sim)
                    return flat_error(400, "Generation failed: simulated executor error")
                if sim.faults.cut_after is not None:
                    self.fail_generation(sim)
                    if request.transport is not None:
                        request.transport.close()
                    return web.Response(status=500)
                self.end_generation(
                    sim, outcome.main_finish, outcome.completion_tokens, outcome.started, outcome.first_token_at
                )
                return json_response(200, self._full(kind, body, sim, outcome, plan, cached))
        finally:
            self.live_prompt_tokens.pop(rid, None)
            self.started_at.pop(rid, None)

    def _usage(self, sim: SimRequest, completion: int, cached: int) -> dict[str, Any]:
        return {
            "prompt_tokens": sim.prompt_tokens,
            "total_tokens": sim.prompt_tokens + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    def _full(
        self, kind: str, body: dict[str, Any], sim: SimRequest, outcome: Outcome, plan: ToolCallPlan | None, cached: int
    ) -> dict[str, Any]:
        want_logprobs, top_n = logprobs.requested(body)
        completion_top = logprobs.completion_requested(body) if kind == "completion" else None
        choices = []
        for i in range(outcome.n):
            reason = openai_finish(outcome.finish[i], plan is not None)
            stop_reason = outcome.matched[i] if outcome.finish[i] == "stop_sequence" else None
            if kind == "chat":
                calls = []
                content = outcome.text(i)
                if plan is not None:
                    calls = [
                        {
                            "id": f"chatcmpl-tool-{os.urandom(16).hex()}",
                            "type": "function",
                            "function": {"name": plan.name, "arguments": content},
                        }
                    ]
                    content = ""
                choices.append(
                    {
                        "index": i,
                        "message": {
                            "role": "assistant",
                            "content": content,
                            "reasoning_content": "",
                            "reasoning": None,
                            "tool_calls": calls,
                        },
                        "logprobs": logprobs.content(outcome.texts[i], outcome.token_ids[i], top_n, True)
                        if want_logprobs and plan is None
                        else None,
                        "finish_reason": reason,
                        "stop_reason": stop_reason,
                        "mm_embedding_handle": None,
                        "disaggregated_params": None,
                        "avg_decoded_tokens_per_iter": None,
                    }
                )
            else:
                choices.append(
                    {
                        "index": i,
                        "text": outcome.text(i),
                        "token_ids": None,
                        "logprobs": logprobs.completion(outcome.texts[i], outcome.token_ids[i], completion_top)
                        if completion_top is not None
                        else None,
                        "context_logits": None,
                        "finish_reason": reason,
                        "stop_reason": stop_reason,
                        "disaggregated_params": None,
                        "avg_decoded_tokens_per_iter": None,
                    }
                )
        usage = self._usage(sim, outcome.completion_tokens, cached)
        if kind == "chat":
            return {
                "id": sim.request_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": choices,
                "usage": usage,
                "prompt_token_ids": None,
                "prompt_token_ids_b64": None,
            }
        return {
            "id": sim.request_id,
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": choices,
            "usage": usage,
            "prompt_token_ids": None,
        }

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        kind: str,
        sim: SimRequest,
        gen: Any,
        outcome: Outcome,
        plan: ToolCallPlan | None,
        cached: int,
    ) -> web.StreamResponse:
        options = body.get("stream_options")
        # StreamOptions.include_usage defaults to True: any stream_options object asks for usage.
        include_usage = isinstance(options, dict) and options.get("include_usage", True) is not False
        continuous = (
            include_usage and bool(options.get("continuous_usage_stats")) if isinstance(options, dict) else False
        )
        head = {
            "id": sim.request_id,
            "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
            "created": int(time.time()),
            "model": body.get("model"),
        }
        stream = SSEStream(request, self.paced(sim))
        counts = [0] * outcome.n
        tool_started = [False] * outcome.n
        want_logprobs, top_n = logprobs.requested(body)
        completion_top = logprobs.completion_requested(body) if kind == "completion" else None

        def usage_now() -> dict[str, Any]:
            done = sum(counts)
            return {
                "prompt_tokens": sim.prompt_tokens,
                "total_tokens": sim.prompt_tokens + done,
                "completion_tokens": done,
            }

        if kind == "chat":
            for i in range(outcome.n):
                chunk: dict[str, Any] = {**head, "choices": [{"index": i, "delta": {"role": "assistant"}}]}
                if continuous:
                    chunk["usage"] = usage_now()
                # The first frame is written with a space after the JSON.
                await stream.send(frame(chunk)[:-2] + b" \n\n")

        def emit(token: Token) -> list[bytes]:
            i = token.index
            if token.finish != "abort":
                counts[i] += 1
            reason = openai_finish(token.finish, plan is not None) if token.finish else None
            if kind == "chat":
                if plan is not None and token.text:
                    out = []
                    if not tool_started[i]:
                        tool_started[i] = True
                        out.append(
                            frame(
                                {
                                    **head,
                                    "choices": [
                                        {
                                            "index": i,
                                            "delta": {
                                                "tool_calls": [
                                                    {
                                                        "id": f"chatcmpl-tool-{os.urandom(16).hex()}",
                                                        "type": "function",
                                                        "index": 0,
                                                        "function": {"name": plan.name, "arguments": ""},
                                                    }
                                                ]
                                            },
                                        }
                                    ],
                                }
                            )
                        )
                    # `type` is a non-null default, so it repeats on every argument delta.
                    call = {"type": "function", "index": 0, "function": {"arguments": token.text}}
                    out.append(frame({**head, "choices": [{"index": i, "delta": {"tool_calls": [call]}}]}))
                    return out
                delta = {"content": token.text, "reasoning_content": ""}
                choice: dict[str, Any] = {"index": i, "delta": delta}
                if want_logprobs and token.text:  # chunks drop nulls: the key appears only with values
                    choice["logprobs"] = logprobs.content([token.text], [token.token_id], top_n, True)
            else:
                choice = {
                    "index": i,
                    "text": token.text,
                    "token_ids": None,
                    "logprobs": logprobs.completion([token.text], [token.token_id], completion_top)
                    if completion_top is not None
                    else None,
                    "finish_reason": None,
                    "stop_reason": None,
                    "avg_decoded_tokens_per_iter": None,
                }
            if reason is not None:
                choice["finish_reason"] = reason
                if token.finish == "stop_sequence":
                    choice["stop_reason"] = token.matched
            chunk = {**head, "choices": [choice]}
            if continuous:
                chunk["usage"] = usage_now()
            elif kind == "completion":
                chunk["usage"] = None  # completions chunks keep their nulls
            return [frame(chunk)]

        async def fail(s: SSEStream) -> None:
            if kind == "chat":
                await s.cut()  # the chat generator re-raises: no error event, no [DONE]
                return
            await s.send(
                frame(
                    {
                        "error": {
                            "message": "Simulated executor error",
                            "type": "server_error",
                            "code": None,
                            "param": None,
                        }
                    }
                )
            )
            await s.send(DONE_FRAME)
            await s.finish()

        try:
            await pump(sim, gen, stream, emit, fail, outcome)
        except StreamEnded:
            self.fail_generation(sim)
            return stream.response
        if include_usage:
            await stream.send(
                frame({**head, "choices": [], "usage": self._usage(sim, outcome.completion_tokens, cached)})
            )
        if not sim.faults.no_done:
            await stream.send(DONE_FRAME)
        self.end_generation(
            sim, outcome.main_finish, outcome.completion_tokens, outcome.started, outcome.first_token_at
        )
        return await stream.finish()
