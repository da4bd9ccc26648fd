"""The vLLM dialect (`vllm serve`): the gateway's request id names the generation
(`request_id`), legacy `guided_*` fields become `structured_outputs` (vLLM >= 0.11
ignores them silently), load from Prometheus `vllm:*` gauges, and with option
`explicit_abort` the abort endpoint besides the closed connection, which vLLM does not
always notice. Facts and sources: docs/adapters.md "vLLM", docs/runtimes.md §1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from adapters import prometheus_text as prom
from adapters.base import Capabilities, GenerationRequest, LoadSnapshot
from adapters.dialect import Call, Reader
from adapters.openai import OpenAIDialect

# vllm/renderers/params.py and get_max_tokens (0.33; "However, you requested" in <= 0.10);
# the engine's own input check says "... is longer than the maximum model length of N".
CONTEXT = re.compile(
    r"maximum context length is \d+ tokens|exceeds model's maximum context length"
    r"|longer than the maximum model length",
    re.IGNORECASE,
)

# Removed request fields (vLLM >= 0.11) -> keys of `structured_outputs`.
GUIDED_TO_STRUCTURED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
    "guided_whitespace_pattern": "whitespace_pattern",
}
# Chose a decoding backend per request; vLLM v1 picks it per server.
GUIDED_DROPPED = ("guided_decoding_backend",)

# Registered by `--enable-scale-out` (entrypoints/scale_out/token_in_token_out/api_router.py,
# 403 without it); it answers 200 at once and aborts in the background. A server in
# developer mode (VLLM_SERVER_DEV_MODE=1) has `/abort_requests` with the same body.
ABORT_PATH = "/inference/v1/abort_requests"


def translate_guided(body: dict[str, Any]) -> None:
    """Move legacy `guided_*` fields into `structured_outputs` (in place)."""
    structured: dict[str, Any] = {}
    for old, new in GUIDED_TO_STRUCTURED.items():
        if old in body:
            value = body.pop(old)
            if value is not None:
                structured[new] = value
    for old in GUIDED_DROPPED:
        body.pop(old, None)
    if structured and "structured_outputs" not in body:
        body["structured_outputs"] = structured


def abort_ids(request: GenerationRequest) -> list[str]:
    """vLLM's external id of a request the gateway sent with `X-Request-Id: <id>`:
    `chatcmpl-<id>` for chat, `cmpl-<id>-<prompt index>` for a completion, whose one
    prompt is index 0 (chat_completion/serving.py, completion/serving.py). Aborting
    it aborts every n > 1 sample too (v1/engine/output_processor.py `abort_requests`)."""
    if request.kind == "chat":
        return [f"chatcmpl-{request.request_id}"]
    return [f"cmpl-{request.request_id}-0"]


class VLLMDialect(OpenAIDialect):
    runtime = "vLLM"
    api_prefix = "/v1"
    health_path = "/health"
    context_pattern = CONTEXT
    abort_hint = "start it with --enable-scale-out or drop the option explicit_abort"

    def __init__(self, backend: str, served_model: str | None = None, options: Mapping[str, Any] | None = None):
        super().__init__(backend, served_model, options)
        self._prefix_counters: tuple[float, float] | None = None
        self._abort_path = str(self.options.get("abort_path", ABORT_PATH))

    def declare_capabilities(self) -> Capabilities:
        return Capabilities(
            tools=self.option("tools", True),
            cached_tokens=self.option("prompt_tokens_details", False),
            explicit_abort=self.option("explicit_abort", False),
            embeddings=self.option("embeddings", False),
            tokenize=True,
        )

    def body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream)
        # vLLM names the generation after `request_id` (the X-Request-Id header wins
        # with --enable-request-id-headers; both carry the gateway's own id).
        body["request_id"] = request.request_id
        if not self.option("legacy_guided", False):  # a vLLM <= 0.10 still reads guided_*
            translate_guided(body)
        return body

    def abort_calls(self, request: GenerationRequest) -> list[Call]:
        if not self.capabilities.explicit_abort:
            return []
        return [Call(self._abort_path, {"request_ids": abort_ids(request)})]

    async def load(self, http: Reader) -> LoadSnapshot:
        samples, read_at = await prom.scrape(http, "/metrics")
        if samples is None:
            return LoadSnapshot() if read_at is None else LoadSnapshot(read_at=read_at)
        kv = prom.mean(samples, "vllm:kv_cache_usage_perc")
        if kv is None:
            kv = prom.mean(samples, "vllm:gpu_cache_usage_perc")  # V0 name
        return prom.gauge_snapshot(
            samples,
            read_at,
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            kv,
            self._prefix_hit_rate(samples),
        )

    def _prefix_hit_rate(self, samples: list[prom.Sample]) -> float | None:
        """Hits over queries (token counters) since the previous read, so the rate
        follows the current traffic; otherwise (first read, no new queries, counters
        reset by a restart) the totals since start."""
        hits = prom.first_total(samples, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
        queries = prom.first_total(samples, "vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
        if hits is None or queries is None:
            return prom.mean(samples, "vllm:gpu_prefix_cache_hit_rate")  # V0 gauge
        previous, self._prefix_counters = self._prefix_counters, (hits, queries)
        if previous is not None and queries > previous[1] and hits >= previous[0]:
            return (hits - previous[0]) / (queries - previous[1])
        return hits / queries if queries > 0 else None
