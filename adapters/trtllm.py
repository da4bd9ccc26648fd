"""The TensorRT-LLM dialect (`trtllm-serve`): every request model forbids unknown
fields, so bodies are cut to what TRT-LLM declares; generation failures it answers as
400 are the backend's (502); load from its destructive JSON `/metrics` (one reader per
server in this process) or `/prometheus/metrics`. Facts and sources: docs/adapters.md
"TensorRT-LLM", docs/runtimes.md §3 and `tensorrt_llm/serve/openai_protocol.py`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from adapters import prometheus_text as prom
from adapters.base import SAMPLING_PARAMETERS, Capabilities, GenerationRequest, LoadSnapshot
from adapters.dialect import Reader, SharedLoad, shared_load
from adapters.openai import OpenAIDialect
from adapters.runtime_errors import ParsedError

# tensorrt_llm/llmapi/llm.py `_check_arguments`; executor/base_worker.py `_deduce_max_tokens` (newer main).
CONTEXT = re.compile(
    r"should not exceed max_num_tokens|should not exceed max_seq_len|maximum context length is \d+ tokens",
    re.IGNORECASE,
)

# What we may send that both request models declare (openai_protocol.py): every
# sampling parameter of the contract, the request envelope, and TRT-LLM's own
# extensions a client may pass through. What the gateway adds beyond these
# (`parallel_tool_calls`, `store`, `metadata`, ...) would be a 400.
_ENVELOPE = {"model", "max_completion_tokens", "response_format", "stream", "stream_options", "user", "priority"}
_EXTENSIONS = {
    *("best_of", "use_beam_search", "top_p_min", "length_penalty", "early_stopping"),
    *("include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens"),
    *("truncate_prompt_tokens", "lora_request", "add_special_tokens", "cache_salt"),
}
_COMMON = set(SAMPLING_PARAMETERS) | _ENVELOPE | _EXTENSIONS
_CHAT_ONLY = {"messages", "top_logprobs", "tools", "tool_choice", "reasoning_effort", "thinking_token_budget"}
CHAT_FIELDS = _COMMON | _CHAT_ONLY | {"add_generation_prompt", "documents", "chat_template", "chat_template_kwargs"}
COMPLETION_FIELDS = _COMMON | {"prompt", "echo", "suffix"}

# Generation failures are raised as 400 BadRequestError by the server's catch-all.
_BACKEND_FAULT = re.compile(r"Generation failed|internal error|CUDA|out of memory", re.IGNORECASE)


@dataclass
class _JsonMetricsReader(SharedLoad):
    """The one reader of one server's destructive JSON `/metrics` (`shared_load`)."""

    seen_stats: bool = False


class TRTLLMDialect(OpenAIDialect):
    runtime = "TensorRT-LLM"
    api_prefix = "/v1"
    health_path = "/health"
    context_pattern = CONTEXT

    def __init__(self, backend: str, served_model: str | None = None, options: Mapping[str, Any] | None = None):
        super().__init__(backend, served_model, options)
        self._metrics = str(self.options.get("metrics", "json"))  # json | prometheus
        # Reads closer together than this reuse the last snapshot, so that two
        # callers do not split one server's iteration stats between them.
        self._min_interval_s = float(self.options.get("metrics_min_interval_s", 0.5))

    def declare_capabilities(self) -> Capabilities:
        return Capabilities(tools=self.option("tools", True), cached_tokens=True)

    def body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream)
        allowed = CHAT_FIELDS if request.kind == "chat" else COMPLETION_FIELDS
        return {k: v for k, v in body.items() if k in allowed}

    def classify(self, status: int, parsed: ParsedError) -> int | None:
        if status == 400 and (_BACKEND_FAULT.search(parsed.message) or parsed.type == "internal_error"):
            return 500  # the backend's fault: the generic rule makes it 502
        return None

    async def load(self, http: Reader) -> LoadSnapshot:
        if self._metrics == "prometheus":  # needs `return_perf_metrics: true`
            return await prom.gauge_load(
                http,
                "/prometheus/metrics",
                "trtllm_num_requests_running",
                "trtllm_num_requests_waiting",
                "trtllm_kv_cache_utilization",
                "trtllm_kv_cache_hit_rate",
            )
        return await shared_load(http, self._min_interval_s, _JsonMetricsReader, _read_json_metrics)


async def _read_json_metrics(http: Reader, reader: _JsonMetricsReader) -> LoadSnapshot:
    try:
        status, raw = await http.get("/metrics")
    except (TimeoutError, aiohttp.ClientError, OSError):
        return LoadSnapshot()
    reader.read_at = time.time()
    if status != 200:
        return LoadSnapshot(read_at=reader.read_at)
    try:
        stats = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return LoadSnapshot(read_at=reader.read_at)
    snapshot = parse_iteration_stats(stats, reader.read_at)
    if snapshot is None and reader.seen_stats:
        # No engine iteration since the last read: nothing ran or waited
        # (a queued request makes the engine iterate within milliseconds).
        snapshot = LoadSnapshot(
            waiting=0,
            running=0,
            kv_usage=reader.last.kv_usage,
            prefix_hit_rate=reader.last.prefix_hit_rate,
            read_at=reader.read_at,
        )
    elif snapshot is None:
        # Never any stats: iteration stats are off (`enable_iter_perf_stats`).
        snapshot = LoadSnapshot(read_at=reader.read_at)
    else:
        reader.seen_stats = True
    reader.last = snapshot
    return snapshot


def parse_iteration_stats(stats: Any, read_at: float) -> LoadSnapshot | None:
    """The newest iteration-stats entry of a JSON `/metrics` read; None if empty."""
    if not isinstance(stats, list):
        return None
    entries = [s for s in stats if isinstance(s, dict)]
    if not entries:
        return None
    newest = max(entries, key=lambda s: s.get("iter", 0) if isinstance(s.get("iter"), (int, float)) else 0)

    def count(key: str) -> int | None:
        value = newest.get(key)
        return int(value) if isinstance(value, (int, float)) else None

    stats = newest.get("kvCacheStats")
    kv: dict = stats if isinstance(stats, dict) else {}
    kv_usage = None
    used, total_blocks = kv.get("usedNumBlocks"), kv.get("maxNumBlocks")
    if isinstance(used, (int, float)) and isinstance(total_blocks, (int, float)) and total_blocks > 0:
        kv_usage = float(used) / float(total_blocks)
    hit = kv.get("cacheHitRate")
    if not isinstance(hit, (int, float)):
        reused, missed = kv.get("reusedBlocks"), kv.get("missedBlocks")
        hit = (
            reused / (reused + missed)
            if isinstance(reused, (int, float)) and isinstance(missed, (int, float)) and reused + missed > 0
            else None
        )
    return LoadSnapshot(
        waiting=count("numQueuedRequests"),
        running=count("numActiveRequests"),
        kv_usage=kv_usage,
        prefix_hit_rate=float(hit) if hit is not None else None,
        read_at=read_at,
    )
