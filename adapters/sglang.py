"""SGLang (`python -m sglang.launch_server`, OpenAI server under /v1), facts from
docs/runtimes.md §2.

What differs from OpenAI and is handled here:
- errors: flat `{"object": "error", message, type, param, code: int}`; in a stream
  `data: {"error": {"object": "error", ...}}` then `[DONE]` (queue full there is
  `type: "SERVICE_UNAVAILABLE"`, code 503; non-stream it is 503 with `type: "503"`).
- context length: "The input (N tokens) is longer than the model's context length
  (M tokens)." / "Requested token count exceeds the model's maximum context length
  of M tokens ..." / "max_completion_tokens is too large".
- newer SGLang refuses a model other than its served name with a 400 "The model `m`
  does not exist. ..." (its own test, tests/adapters/recordings/sglang/unknown_model.json):
  the gateway sent the configured served model, so that is the deployment's fault,
  answered as a 404 would be (502, may fail over), not as the client's mistake.
- `finish_reason` in a separate content-free chunk (the decoder does not care),
  `matched_stop` and top-level `reasoning_tokens` ignored, `abort` an error.
- tool-call argument pieces repeat `id: null, name: null, type` (decoded as pieces
  without id or name).
- cached tokens only with `--enable-cache-report` (option `cache_report: true`).
- cancellation: closing the connection is noticed only by a 4 s poll (or 2 s
  after the response), so the gateway also calls `POST /abort_request` with the
  request id, which it sends as SGLang's `rid`. That id is the gateway's own,
  random and unique (never the client's `x-request-id`): an abort by rid reaches
  only the generation the gateway started.
- `/health` runs a 1-token generation and answers after about 1 s (503 while
  warming up): the health check waits for it.
- load from `GET /v1/loads` (JSON, no flag needed), else Prometheus `/metrics`.
- `/v1/embeddings` needs a server launched with `--is-embedding` (which then cannot
  generate): option `embeddings: true` declares it. `/v1/tokenize` answers without
  token strings (`return_token_strs` is refused) and adds the generation prompt to
  messages unless `continue_final_message`; `/v1/detokenize` answers `{"text"}` and skips special tokens unless told
  not to (the gateway keeps them, as vLLM does).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import aiohttp
import orjson

from adapters import oneshot_wire
from adapters.base import GenerationRequest, LoadSnapshot
from adapters.oneshot import DetokenizeRequest, DetokenizeResult, TokenizeRequest, TokenizeResult
from adapters.runtime_adapter import RuntimeAdapter
from adapters.runtime_errors import ParsedError

log = logging.getLogger(__name__)

# srt/managers/tokenizer_manager.py (~l.1337-1376).
CONTEXT = re.compile(
    r"longer than the model's context length|exceeds the model's maximum context length"
    r"|max_completion_tokens is too large",
    re.IGNORECASE,
)
# Newer main checks `model` (test/registered/openai_server/validation/test_strict_model_validation.py).
UNKNOWN_MODEL = re.compile(r"The model `[^`]*` does not exist")


class SGLangAdapter(RuntimeAdapter):
    runtime = "SGLang"
    context_pattern = CONTEXT
    # /health submits a 1-token generation and polls once a second; it gives up
    # by itself after SGLANG_HEALTH_CHECK_TIMEOUT (20 s).
    health_timeout_s = 25.0

    def __init__(self, name: str, url: str, served_model: str | None = None, **kwargs: Any) -> None:
        super().__init__(name, url, served_model, **kwargs)
        self.capabilities = self._capabilities(
            cached_tokens=bool(self.options.get("cache_report", False)),
            explicit_abort=True,
            embeddings=bool(self.options.get("embeddings", False)),
            tokenize=True,
        )
        self._load_source: str = str(self.options.get("load_source", "auto"))  # auto | loads | metrics
        self._abort_tasks: set[asyncio.Task[None]] = set()

    def _build_body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        body = super()._build_body(request, stream)
        # SGLang names the request after `rid`, so the abort call can name it too.
        body["rid"] = request.request_id
        return body

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        if request.return_token_strs:
            raise self._unsupported("token strings in /tokenize answers", "return_token_strs")
        if request.messages is not None and not (request.add_generation_prompt or request.continue_final_message):
            raise self._unsupported("tokenizing messages without the generation prompt", "add_generation_prompt")
        body = oneshot_wire.tokenize_body(request, self.served_model)
        body.pop("add_generation_prompt", None)  # SGLang renders messages as a chat request does
        payload = await self._call_json("/tokenize", body, request.request_id)
        return oneshot_wire.decode_tokenize(payload, self.name, want_strs=False)

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResult:
        body = {**oneshot_wire.detokenize_body(request, self.served_model), "skip_special_tokens": False}
        payload = await self._call_json("/detokenize", body, request.request_id)
        return oneshot_wire.decode_detokenize(payload, self.name, "text")

    def _classify(self, status: int, parsed: ParsedError) -> int | None:
        if status == 400 and UNKNOWN_MODEL.search(parsed.message):
            return 404  # the configured served model is wrong: the table's "does not serve" rule
        return None

    def _abort_rids(self, request: GenerationRequest) -> list[str]:
        # With n > 1 SGLang runs one request per sample, named `{rid}_{i}`
        # (io_struct.py `_normalize_rid`).
        n = request.sampling.n
        return [request.request_id] if n <= 1 else [f"{request.request_id}_{i}" for i in range(n)]

    async def _on_abort(self, request: GenerationRequest) -> None:
        # Sent from a task of its own: the caller is usually being cancelled (the
        # client went away), and a cancelled scope would cancel the call too.
        task = asyncio.get_running_loop().create_task(self._abort(self._abort_rids(request), request.trace_headers))
        self._abort_tasks.add(task)
        task.add_done_callback(self._abort_tasks.discard)

    async def _abort(self, rids: list[str], trace_headers: tuple[tuple[str, str], ...]) -> None:
        timeout = aiohttp.ClientTimeout(total=2.0)
        for rid in rids:
            try:
                async with self.session.post(
                    f"{self.base_url}/abort_request",
                    data=orjson.dumps({"rid": rid}),
                    headers={"content-type": "application/json", **dict(trace_headers)},
                    timeout=timeout,
                ) as resp:
                    await resp.read()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                # The closed connection still stops it, only later.
                log.debug("SGLang abort of %s on %s failed: %s", rid, self.name, exc)

    async def aclose(self) -> None:
        if self._abort_tasks:
            await asyncio.wait(set(self._abort_tasks), timeout=2.5)
        await super().aclose()

    async def load(self) -> LoadSnapshot:
        if self._load_source in ("auto", "loads"):
            snapshot = await self._load_from_loads()
            if snapshot is not None or self._load_source == "loads":
                return snapshot or LoadSnapshot()
        return await self._load_from_metrics()

    async def _load_from_loads(self) -> LoadSnapshot | None:
        """`GET /v1/loads`: one entry per DP rank (srt/entrypoints/v1_loads.py)."""
        try:
            status, raw = await self._get("/v1/loads?include=core")
        except (TimeoutError, aiohttp.ClientError, OSError):
            return LoadSnapshot()
        read_at = time.time()
        if status == 404:
            self._load_source = "metrics"  # an SGLang without /v1/loads
            return None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return LoadSnapshot(read_at=read_at)
        return parse_loads(data, read_at)

    async def _load_from_metrics(self) -> LoadSnapshot:
        return await self._load_from_gauges(
            "/metrics",
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:token_usage",
            "sglang:cache_hit_rate",
        )


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
