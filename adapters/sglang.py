"""The SGLang dialect (`python -m sglang.launch_server`): the gateway's request id is
SGLang's `rid`, which the abort call names (SGLang notices a closed connection only by
a poll); a refused served model is the deployment's fault; `/health` runs a generation
(slow); load from `/v1/loads`, else Prometheus; `/v1/tokenize` and `/v1/detokenize`
in SGLang's shape. Facts and sources: docs/adapters.md "SGLang", docs/runtimes.md §2.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from adapters import oneshot_wire
from adapters import prometheus_text as prom
from adapters.base import Capabilities, GenerationRequest, LoadSnapshot
from adapters.dialect import Call, Reader
from adapters.oneshot import DetokenizeRequest, DetokenizeResult, TokenizeRequest, TokenizeResult
from adapters.openai import OpenAIDialect
from adapters.runtime_errors import ParsedError

log = logging.getLogger("switchyard.upstream")

# srt/managers/tokenizer_manager.py (~l.1337-1376).
CONTEXT = re.compile(
    r"longer than the model's context length|exceeds the model's maximum context length"
    r"|max_completion_tokens is too large",
    re.IGNORECASE,
)
# Newer main checks `model` (test/registered/openai_server/validation/test_strict_model_validation.py).
UNKNOWN_MODEL = re.compile(r"The model `[^`]*` does not exist")


class SGLangDialect(OpenAIDialect):
    runtime = "SGLang"
    api_prefix = "/v1"
    health_path = "/health"
    # /health submits a 1-token generation and polls once a second; it gives up
    # by itself after SGLANG_HEALTH_CHECK_TIMEOUT (20 s).
    health_timeout_s = 25.0
    context_pattern = CONTEXT

    def __init__(self, backend: str, served_model: str | None = None, options: Mapping[str, Any] | None = None):
        super().__init__(backend, served_model, options)
        self._load_source = str(self.options.get("load_source", "auto"))  # auto | loads | metrics
        self._loads_missing_logged = False

    def declare_capabilities(self) -> Capabilities:
        return Capabilities(
            tools=self.option("tools", True),
            cached_tokens=self.option("cache_report", False),
            explicit_abort=True,
            embeddings=self.option("embeddings", False),
            tokenize=True,
        )

    def body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream)
        body["rid"] = request.request_id  # SGLang names the request after `rid`, and so can the abort call
        return body

    def classify(self, status: int, parsed: ParsedError) -> int | None:
        if status == 400 and UNKNOWN_MODEL.search(parsed.message):
            return 404  # the configured served model is wrong: the table's "does not serve" rule
        return None

    def abort_calls(self, request: GenerationRequest) -> list[Call]:
        # With n > 1 SGLang runs one request per sample, named `{rid}_{i}` (io_struct.py `_normalize_rid`).
        n, rid = request.sampling.n, request.request_id
        return [Call("/abort_request", {"rid": r}) for r in ([rid] if n <= 1 else [f"{rid}_{i}" for i in range(n)])]

    def tokenize_call(self, request: TokenizeRequest) -> Call:
        if request.return_token_strs:
            raise self.unsupported("token strings in /tokenize answers", "return_token_strs")
        if request.messages is not None and not (request.add_generation_prompt or request.continue_final_message):
            raise self.unsupported("tokenizing messages without the generation prompt", "add_generation_prompt")
        body = oneshot_wire.tokenize_body(request, self.served_model)
        body.pop("add_generation_prompt", None)  # SGLang renders messages as a chat request does
        return Call(self.api_prefix + "/tokenize", body)

    def read_tokenize(self, payload: Any, request: TokenizeRequest) -> TokenizeResult:
        return oneshot_wire.decode_tokenize(payload, self.backend, want_strs=False)

    def detokenize_call(self, request: DetokenizeRequest) -> Call:
        body = {**oneshot_wire.detokenize_body(request, self.served_model), "skip_special_tokens": False}
        return Call(self.api_prefix + "/detokenize", body)

    def read_detokenize(self, payload: Any, request: DetokenizeRequest) -> DetokenizeResult:
        return oneshot_wire.decode_detokenize(payload, self.backend, "text")

    async def load(self, http: Reader) -> LoadSnapshot:
        if self._load_source in ("auto", "loads"):
            snapshot = await self._load_from_loads(http)
            if snapshot is not None:  # None: auto found no /v1/loads
                return snapshot
        return await prom.gauge_load(
            http,
            "/metrics",
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:token_usage",
            "sglang:cache_hit_rate",
        )

    async def _load_from_loads(self, http: Reader) -> LoadSnapshot | None:
        """`GET /v1/loads`: one entry per DP rank (srt/entrypoints/v1_loads.py)."""
        try:
            status, raw = await http.get("/v1/loads?include=core")
        except (TimeoutError, aiohttp.ClientError, OSError):
            return LoadSnapshot()
        read_at = time.time()
        if status == 404 and self._load_source == "auto":
            # An SGLang without /v1/loads: Prometheus from now on (said once, as it is
            # decided once), so an operator knows why the load has no DP-rank view.
            self._load_source = "metrics"
            log.warning("backend %s has no GET /v1/loads (HTTP 404): its load is read from /metrics", self.backend)
            return None
        if status == 404:
            # `loads` named: the operator wants that endpoint, so no switch; the load is
            # unknown, said once per backend.
            if not self._loads_missing_logged:
                self._loads_missing_logged = True
                log.warning(
                    "backend %s has no GET /v1/loads (HTTP 404) and its load_source is loads: its load is unknown "
                    "(load_source: metrics or auto reads /metrics)",
                    self.backend,
                )
            return LoadSnapshot(read_at=read_at)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return LoadSnapshot(read_at=read_at)
        return parse_loads(data, read_at)


def parse_loads(data: Any, read_at: float) -> LoadSnapshot:
    """A `/v1/loads` report: requests summed over DP ranks, ratios averaged."""
    loads = data.get("loads") if isinstance(data, dict) else None
    if not isinstance(loads, list) or not loads:
        return LoadSnapshot(read_at=read_at)

    def ints(key: str) -> int | None:
        values: list[float] = [r[key] for r in loads if isinstance(r, dict) and isinstance(r.get(key), (int, float))]
        return int(sum(values)) if values else None

    def ratio(key: str) -> float | None:
        values = [float(r[key]) for r in loads if isinstance(r, dict) and isinstance(r.get(key), (int, float))]
        return sum(values) / len(values) if values else None

    return LoadSnapshot(
        waiting=ints("num_waiting_reqs"),
        running=ints("num_running_reqs"),
        kv_usage=ratio("token_usage"),
        prefix_hit_rate=ratio("cache_hit_rate"),
        read_at=read_at,
    )
