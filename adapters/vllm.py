"""vLLM (`vllm serve`, OpenAI server under /v1), facts from docs/runtimes.md §1.

What differs from OpenAI and is handled here:
- errors: nested `{"error": {..., "code": <int>}}` (flat before 0.10.1), in-stream
  `data: {"error": ...}` then `[DONE]`; `{"error": "Unauthorized"}` for a bad key.
- context length: 400 "This model's maximum context length is N tokens ..." or
  "Input length (X) exceeds model's maximum context length (Y)".
- legacy `guided_*` fields are silently ignored since they were removed
  (`serve/engine/protocol.py` `_REMOVED_GUIDED_FIELDS`): translated into
  `structured_outputs` so the constraint still applies.
- finish reasons `abort` (an error) and `repetition` (a stop) via `openai_wire`.
- `prompt_tokens_details.cached_tokens` only with `--enable-prompt-tokens-details`
  (option `prompt_tokens_details: true` declares it).
- tools need `--enable-auto-tool-choice --tool-call-parser` (option `tools: false`
  when the server runs without them, so the gateway answers 400 itself).
- load from Prometheus `/metrics` (`vllm:*`).
- request ids: vLLM aborts a disconnected request by its id, so the id is the
  gateway's own (`request_id` in the body and `X-Request-Id`), never a client's.
- cancellation: closing the connection is not always noticed (docs/vllm-cpu.md), so
  with option `explicit_abort: true` (the server runs with `--enable-scale-out`) the
  adapter also calls `POST /inference/v1/abort_requests` with vLLM's id of the request.
- `/v1/embeddings` only when the server runs an embedding model (`--runner pooling`;
  otherwise the route does not exist): option `embeddings: true` declares it.
  `/tokenize` and `/detokenize` (server root, always served) are vLLM's own shape,
  which is the gateway's.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import aiohttp
import orjson

from adapters import oneshot_wire
from adapters import prometheus_text as prom
from adapters.base import GenerationRequest, LoadSnapshot
from adapters.oneshot import DetokenizeRequest, DetokenizeResult, TokenizeRequest, TokenizeResult
from adapters.runtime_adapter import RuntimeAdapter, gauge_snapshot

log = logging.getLogger(__name__)

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
ABORT_TIMEOUT_S = 2.0


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


class VLLMAdapter(RuntimeAdapter):
    runtime = "vLLM"
    context_pattern = CONTEXT

    def __init__(self, name: str, url: str, served_model: str | None = None, **kwargs: Any) -> None:
        super().__init__(name, url, served_model, **kwargs)
        self.capabilities = self._capabilities(
            cached_tokens=bool(self.options.get("prompt_tokens_details", False)),
            explicit_abort=bool(self.options.get("explicit_abort", False)),
            embeddings=bool(self.options.get("embeddings", False)),
            tokenize=True,
        )
        self._prefix_counters: tuple[float, float] | None = None
        self._abort_path = str(self.options.get("abort_path", ABORT_PATH))
        self._abort_tasks: set[asyncio.Task[None]] = set()
        self._abort_refusal_logged = False

    def _build_body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        body = super()._build_body(request, stream)
        # vLLM names the generation after `request_id` (the X-Request-Id header wins
        # with --enable-request-id-headers; both carry the gateway's own id).
        body["request_id"] = request.request_id
        if not self.options.get("legacy_guided", False):  # a vLLM <= 0.10 still reads guided_*
            translate_guided(body)
        return body

    async def _on_abort(self, request: GenerationRequest) -> None:
        if not self.capabilities.explicit_abort:
            return
        # A task of its own: the caller is usually being cancelled (the client went
        # away), and a cancelled scope would cancel the call too.
        task = asyncio.get_running_loop().create_task(self._abort(abort_ids(request), request.trace_headers))
        self._abort_tasks.add(task)
        task.add_done_callback(self._abort_tasks.discard)

    async def _abort(self, ids: list[str], trace_headers: tuple[tuple[str, str], ...]) -> None:
        try:
            async with self.session.post(
                f"{self.base_url}{self._abort_path}",
                data=orjson.dumps({"request_ids": ids}),
                headers={"content-type": "application/json", **dict(trace_headers)},
                timeout=aiohttp.ClientTimeout(total=ABORT_TIMEOUT_S),
            ) as resp:
                await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            # The closed connection may still stop it, only later.
            log.debug("vLLM abort of %s on %s failed: %s", ids, self.name, exc)
            return
        if status != 200 and not self._abort_refusal_logged:
            self._abort_refusal_logged = True
            log.warning(
                "vLLM backend %s answered HTTP %d to %s: start it with --enable-scale-out "
                "or drop the option explicit_abort",
                self.name,
                status,
                self._abort_path,
            )

    async def aclose(self) -> None:
        if self._abort_tasks:
            await asyncio.wait(set(self._abort_tasks), timeout=ABORT_TIMEOUT_S + 0.5)
        await super().aclose()

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        body = oneshot_wire.tokenize_body(request, self.served_model)
        payload = await self._call_json("/tokenize", body, request.request_id, under_api=False)
        return oneshot_wire.decode_tokenize(payload, self.name, request.return_token_strs)

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResult:
        body = oneshot_wire.detokenize_body(request, self.served_model)
        payload = await self._call_json("/detokenize", body, request.request_id, under_api=False)
        return oneshot_wire.decode_detokenize(payload, self.name, "prompt")

    async def load(self) -> LoadSnapshot:
        samples, read_at = await self._scrape("/metrics")
        if samples is None:
            return LoadSnapshot() if read_at is None else LoadSnapshot(read_at=read_at)
        kv = prom.mean(samples, "vllm:kv_cache_usage_perc")
        if kv is None:
            kv = prom.mean(samples, "vllm:gpu_cache_usage_perc")  # V0 name
        return gauge_snapshot(
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
