"""vLLM's endpoints that generate nothing (docs/runtimes.md §1.2): `/tokenize` and
`/detokenize` (`serve/tokenize/`, always served) and `/v1/embeddings`
(`pooling/embed/`, only with `--runner pooling`).

Reproduced: the two tokenize request forms (`prompt`, or `messages` with
`add_generation_prompt`, `continue_final_message`, `add_special_tokens`) and the answer
`{"count", "max_model_len", "tokens", "token_strs"}` (`token_strs` null unless
`return_token_strs`); `{"prompt"}` from `/detokenize`; 404 for another model; embeddings
in OpenAI's shape with an `embd-` id, usage keys in vLLM's order (`prompt_tokens,
total_tokens, completion_tokens, prompt_tokens_details`), `encoding_format` float or
base64 (float32 in the server's byte order, `endianness: native`: little-endian here), `dimensions` refused unless the model is Matryoshka
(`pooling_params.py`), and vLLM's message for an input longer than the context.
"""

from __future__ import annotations

import os
import time
from typing import Any

from aiohttp import web

from simulators.embeddings import EmbeddingDialect, checked_call, float32_base64, hashed_vector, parse_input
from simulators.request import with_default_system
from simulators.server import Simulator, json_response
from simulators.vllm_wire import error

EMBEDDING_DIALECT = EmbeddingDialect(
    error=error,
    too_small="Dimensions must be greater than 0",
    too_long=lambda tokens, limit: (
        f"This model's maximum context length is {limit} tokens. However, you requested {tokens} tokens "
        "in the input for embedding generation. Please reduce the length of the input."
    ),
    full_context_refused=False,
)


def _missing(field: str) -> web.Response:
    return error(
        400,
        f"1 validation error:\n  {{'type': 'missing', 'loc': ('body', '{field}'), 'msg': 'Field required'}}",
        "Bad Request",
        field,
    )


def _wrong_model(sim: Simulator, body: dict[str, Any]) -> web.Response | None:
    model = body.get("model")
    if model is not None and model != sim.opts.model_name:
        return error(
            404, f"The model `{model}` does not exist. Valid aliases: {sim.opts.model_name}.", "NotFoundError", "model"
        )
    return None


async def _read(sim: Simulator, request: web.Request) -> dict[str, Any] | web.Response:
    """The JSON object body of a tokenize or detokenize call, or vLLM's refusal of it
    (not JSON, or another model's name)."""
    body, bad = await sim.read_body(request)
    if bad is not None or not isinstance(body, dict):
        return error(400, f"JSON decode error: {bad}", "Bad Request")
    refusal = _wrong_model(sim, body)
    return body if refusal is None else refusal


async def tokenize(sim: Simulator, request: web.Request) -> web.Response:
    body = await _read(sim, request)
    if isinstance(body, web.Response):
        return body
    tokenizer = sim.tokenizer
    if "messages" in body:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return error(
                400, "1 validation error:\n  messages: Input should be a valid list", "Bad Request", "messages"
            )
        generation_prompt = body.get("add_generation_prompt", True) is not False
        if body.get("continue_final_message") and generation_prompt:
            return error(400, "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        messages = with_default_system(messages, sim.opts.default_system_prompt)
        tokens = tokenizer.encode_chat(messages, generation_prompt, body.get("tools"))
    elif isinstance(body.get("prompt"), str):
        tokens = tokenizer.encode(body["prompt"], add_special_tokens=body.get("add_special_tokens", True) is not False)
    else:
        return _missing("prompt")
    return json_response(
        200,
        {
            "count": len(tokens),
            "max_model_len": sim.opts.max_model_len,
            "tokens": tokens,
            "token_strs": tokenizer.token_strs(tokens) if body.get("return_token_strs") else None,
        },
    )


async def detokenize(sim: Simulator, request: web.Request) -> web.Response:
    body = await _read(sim, request)
    if isinstance(body, web.Response):
        return body
    tokens = body.get("tokens")
    if not isinstance(tokens, list):
        return _missing("tokens")
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= 2**63 - 1 for t in tokens):
        return error(400, "1 validation error:\n  tokens: Input should be greater than or equal to 0", "Bad Request")
    return json_response(200, {"prompt": sim.tokenizer.decode(tokens, skip_special_tokens=False)})


async def embeddings(sim: Simulator, request: web.Request) -> web.Response:
    if request.content_type != "application/json":
        return error(400, "Unsupported Media Type: Only 'application/json' is allowed")
    body, bad = await sim.read_body(request)
    if bad is not None or not isinstance(body, dict):
        return error(400, f"JSON decode error: {bad}", "Bad Request")
    if "input" not in body:
        return _missing("input")
    items = parse_input(body["input"])
    if items is None:
        return error(400, "1 validation error:\n  input: Input should be a valid string", "Bad Request", "input")
    problem = _wrong_model(sim, body)
    if problem is not None:
        return problem
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        return error(400, f"1 validation error:\n  encoding_format: Input should be 'float' or 'base64', got {fmt!r}")
    call = checked_call(sim, items, body, f'"{sim.opts.model_name}"', EMBEDDING_DIALECT)
    if isinstance(call, web.Response):
        return call
    dimensions = body.get("dimensions")
    rid = f"embd-{request.headers.get('X-Request-Id') or os.urandom(16).hex()}"
    await call.run(sim, request.path, rid)
    data = []
    for index, one in enumerate(call.ids):
        vector = hashed_vector(one, sim.opts.embedding_dim, dimensions)
        embedding: Any = vector if fmt == "float" else float32_base64(vector)
        data.append({"index": index, "object": "embedding", "embedding": embedding})
    prompt_tokens = call.prompt_tokens
    return json_response(
        200,
        {
            "id": rid,
            "object": "list",
            "created": int(time.time()),
            "model": sim.opts.model_name,
            "data": data,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens,
                "completion_tokens": 0,
                "prompt_tokens_details": None,
            },
        },
    )
