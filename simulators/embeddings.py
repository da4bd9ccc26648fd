"""What the doubles' `/v1/embeddings` share: reading OpenAI's four `input` forms, the
deterministic vectors, and running one embedding call with the bookkeeping of a
generation (recorded, abortable by the client leaving, timed by `--ttft-ms`); and the
fast OpenAI upstream's answer (simulators/openai_upstream.py) in OpenAI's own shape.

The vectors are hashed token features: each token, and each pair of neighbours, adds
+-1 at a coordinate picked by a hash; the sum is L2-normalized, as the runtimes normalize
theirs. So one text always gets the same vector, texts sharing words get close vectors,
and a Matryoshka cut (`dimensions`) keeps the leading coordinates and normalizes again.
"""

from __future__ import annotations

import asyncio
import base64
import math
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from simulators.faults import Faults
from simulators.request import SimRequest
from simulators.sim_tokenizer import SimTokenizer, WordTokenizer

if TYPE_CHECKING:
    from simulators.server import Simulator

Inputs = list[str] | list[list[int]]


def parse_input(value: Any) -> Inputs | None:
    """OpenAI's `input` as a list of items (texts, or token-id lists); None when it is
    none of the four forms (a string, strings, token ids, lists of token ids)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(v, str) for v in value):
        return list(value)
    if all(_is_id(v) for v in value):
        return [list(value)]
    if all(isinstance(v, list) and all(_is_id(t) for t in v) for v in value):
        return [list(v) for v in value]
    return None


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def token_ids(items: Inputs, tokenizer: SimTokenizer) -> list[list[int]]:
    """Each item's tokens: texts through the double's tokenizer (with special tokens, as
    the runtimes embed them), token lists as sent."""
    return [item if isinstance(item, list) else tokenizer.encode(item, add_special_tokens=True) for item in items]


def hashed_vector(ids: list[int], dim: int, dimensions: int | None = None) -> list[float]:
    vector = [0.0] * dim
    for position, token in enumerate(ids):
        _add(vector, f"{token}", 1.0)
        if position:
            _add(vector, f"{ids[position - 1]}:{token}", 0.5)
    if dimensions is not None:
        vector = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    return [x / norm for x in vector]


def _add(vector: list[float], feature: str, weight: float) -> None:
    h = zlib.crc32(feature.encode())
    vector[h % len(vector)] += weight if h & 0x80000000 else -weight


async def run_embedding(sim: Simulator, path: str, request_id: str, ids: list[list[int]], delay_s: float) -> None:
    """Book one embedding call as a request in flight for `delay_s` (the prefill time). A
    client that leaves meanwhile cancels it, recorded as an abort after the runtime's
    detection delay, like a generation."""
    live = SimRequest(request_id=request_id, kind="embedding", prompt_words=[], prompt_text="")
    sim.recorder.started(request_id, path)
    with sim.watch_disconnect(live):
        if delay_s > 0:
            await asyncio.sleep(delay_s)
    sim.recorder.finished(request_id, finish=None, prompt_tokens=sum(len(i) for i in ids), completion_tokens=0)


@dataclass(frozen=True, slots=True)
class EmbeddingDialect:
    """How one runtime (vLLM, SGLang) words its refusals of an embedding call."""

    error: Callable[..., web.Response]  # its error answer for (status, message, type)
    too_small: str  # a `dimensions` below 1
    too_long: Callable[[int, int], str]  # (an input's tokens, the context length) -> message
    full_context_refused: bool  # an input of exactly the context length is refused too


def dimensions_problem(dimensions: Any, matryoshka: bool, model: str, too_small: str) -> str | None:
    """Why a `dimensions` is refused, as vLLM and SGLang both rule (their pooling
    params): only a Matryoshka model takes one, and only a positive whole number.
    `model` as the runtime quotes it; `too_small`, its words for a number below 1."""
    if dimensions is None:
        return None
    if not matryoshka:
        return f"Model {model} does not support matryoshka representation, changing output dimensions will lead to poor results."
    if not isinstance(dimensions, int) or dimensions < 1:
        return too_small
    return None


def checked_call(
    sim: Simulator, items: Inputs, body: dict[str, Any], model: str, dialect: EmbeddingDialect
) -> EmbeddingCall | web.Response:
    """The call once the checks both runtimes make in this order pass (`dimensions`,
    then an injected failure, then each input against the context), else the
    runtime's refusal. `model` as the runtime quotes it."""
    problem = dimensions_problem(body.get("dimensions"), sim.opts.is_matryoshka, model, dialect.too_small)
    if problem is not None:
        return dialect.error(400, problem)
    call = EmbeddingCall.of(sim, items, body)
    if call.failure_status is not None:
        return dialect.error(
            call.failure_status, f"Simulated failure with status {call.failure_status}", "InternalServerError"
        )
    limit = sim.opts.max_model_len - (1 if dialect.full_context_refused else 0)
    too_long = next((len(one) for one in call.ids if len(one) > limit), None)
    if too_long is not None:
        return dialect.error(400, dialect.too_long(too_long, sim.opts.max_model_len))
    return call


@dataclass(frozen=True, slots=True)
class EmbeddingCall:
    """One embedding call past the runtime's own checks: each item's tokens and the
    faults its texts ask for."""

    ids: list[list[int]]
    faults: Faults

    @classmethod
    def of(cls, sim: Simulator, items: Inputs, body: dict[str, Any]) -> EmbeddingCall:
        texts = [item for item in items if isinstance(item, str)]
        return cls(token_ids(items, sim.tokenizer), sim.faults(texts, body))

    @property
    def failure_status(self) -> int | None:
        """The error status a fault injects, if any."""
        status = self.faults.status
        return status if status is not None and status >= 400 else None

    @property
    def prompt_tokens(self) -> int:
        return sum(len(one) for one in self.ids)

    async def run(self, sim: Simulator, path: str, request_id: str) -> None:
        """`run_embedding` for the time to first token the faults or the options say."""
        delay_ms = self.faults.ttft_ms if self.faults.ttft_ms is not None else sim.opts.ttft_ms
        await run_embedding(sim, path, request_id, self.ids, delay_ms / 1000.0)


def float32_base64(vector: list[float]) -> str:
    """`encoding_format: "base64"` as OpenAI and vLLM write it: little-endian float32."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


_UPSTREAM_WORDS = WordTokenizer()
UPSTREAM_DIM = 32


def openai_embeddings(raw: bytes, model: str, stats: Any) -> tuple[int, dict[str, Any]]:
    """OpenAI's `/v1/embeddings` for the fast upstream: `{"object": "list", "data", "model",
    "usage": {"prompt_tokens", "total_tokens"}}`, `dimensions` cut and renormalized (the
    text-embedding-3 models take it), base64 as little-endian float32. `stats` is the
    upstream's request record."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    items = parse_input(body.get("input")) if isinstance(body, dict) else None
    if not isinstance(body, dict) or items is None or any(item in ("", []) for item in items):
        return 400, {
            "error": {"message": "invalid input", "type": "invalid_request_error", "param": "input", "code": None}
        }
    stats.total += 1
    stats.completed += 1
    stats.last_body = body
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or not 1 <= dimensions <= UPSTREAM_DIM):
        return 400, {
            "error": {"message": "bad dimensions", "type": "invalid_request_error", "param": "dimensions", "code": None}
        }
    ids = token_ids(items, _UPSTREAM_WORDS)
    vectors = [hashed_vector(one, UPSTREAM_DIM, dimensions) for one in ids]
    base64_wanted = body.get("encoding_format") == "base64"
    data = [
        {"object": "embedding", "index": i, "embedding": float32_base64(v) if base64_wanted else v}
        for i, v in enumerate(vectors)
    ]
    tokens = sum(len(one) for one in ids)
    return 200, {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
