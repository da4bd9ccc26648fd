"""SGLang's endpoints that generate nothing (docs/runtimes.md §2.2):
`/v1/tokenize` and `/v1/detokenize` (aliases `/tokenize`, `/detokenize`;
`entrypoints/openai/serving_tokenize.py`) and `/v1/embeddings`
(`serving_embedding.py`).

Reproduced: `prompt` as a string or a list of strings (then `tokens` and `count` are
lists), or `messages`, exactly one of them; the answer `{"tokens", "count",
"max_model_len"}` without token strings; `/detokenize` `{"text"}` (a list for a list of
lists) skipping special tokens unless `skip_special_tokens: false`; `model` never
checked. Embeddings: a server without `--is-embedding` refuses them with the tokenizer
manager's message; empty and whitespace-only inputs refused; `encoding_format` ignored
(always floats); `dimensions` refused unless the model is Matryoshka; the answer's
`model` is the model path, not the served name; usage with `reasoning_tokens`; flat
errors.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from simulators.embeddings import EmbeddingDialect, checked_call, hashed_vector, parse_input
from simulators.server import Simulator, json_response
from simulators.sglang_wire import error
from simulators.shapes import usage_counts

EMBEDDING_DIALECT = EmbeddingDialect(
    error=error,
    too_small="Requested dimensions must be greater than 0",
    too_long=lambda tokens, limit: (
        f"The input ({tokens} tokens) is longer than the model's context length ({limit} tokens)."
    ),
    full_context_refused=True,
)
NOT_EMBEDDING = (
    "This model does not appear to be an embedding model by default. "
    "Please add `--is-embedding` when launching the server or try another model."
)


async def tokenize(sim: Simulator, request: web.Request) -> web.Response:
    body, bad = await sim.read_body(request)
    if bad is not None or not isinstance(body, dict):
        return error(400, f"JSON decode error: {bad}")
    prompt, messages = body.get("prompt"), body.get("messages")
    if (prompt is None) == (messages is None):
        return error(400, "Value error, Exactly one of 'prompt' or 'messages' must be provided.")
    tokenizer = sim.tokenizer
    special = body.get("add_special_tokens", True) is not False
    tokens: Any
    if messages is not None:
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return error(400, "messages: Input should be a valid list")
        tokens = tokenizer.encode_chat(messages, not body.get("continue_final_message"), body.get("tools"))
        count: Any = len(tokens)
    elif isinstance(prompt, str):
        tokens = tokenizer.encode(prompt, add_special_tokens=special)
        count = len(tokens)
    elif isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        tokens = [tokenizer.encode(p, add_special_tokens=special) for p in prompt]
        count = [len(t) for t in tokens]
    else:
        return error(400, f"Invalid prompt type: {type(prompt)}. Expected str or List[str].")
    return json_response(200, {"tokens": tokens, "count": count, "max_model_len": sim.opts.max_model_len})


async def detokenize(sim: Simulator, request: web.Request) -> web.Response:
    body, bad = await sim.read_body(request)
    if bad is not None or not isinstance(body, dict):
        return error(400, f"JSON decode error: {bad}")
    tokens = body.get("tokens")
    skip = body.get("skip_special_tokens", True) is not False
    decode = sim.tokenizer.decode
    if isinstance(tokens, list) and not tokens:
        return json_response(200, {"text": ""})
    if isinstance(tokens, list) and all(_is_id(t) for t in tokens):
        return json_response(200, {"text": decode(tokens, skip_special_tokens=skip)})
    if isinstance(tokens, list) and all(isinstance(t, list) and all(_is_id(i) for i in t) for t in tokens):
        return json_response(200, {"text": [decode(t, skip_special_tokens=skip) for t in tokens]})
    return error(400, "Invalid input: 'tokens' must be a list of integers.")


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _input_problem(value: Any) -> str | None:
    """`_validate_request` of the embedding handler."""
    if not value:
        return "Input cannot be empty"
    if isinstance(value, str):
        return None if value.strip() else "Input cannot be empty or whitespace only"
    if isinstance(value, list) and isinstance(value[0], str):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                return "All items in input list must be strings"
            if not item.strip():
                return f"Input at index {i} cannot be empty or whitespace only"
    return None


async def embeddings(sim: Simulator, request: web.Request) -> web.Response:
    body, bad = await sim.read_body(request)
    if bad is not None or not isinstance(body, dict):
        return error(400, f"JSON decode error: {bad}")
    problem = _input_problem(body.get("input"))
    items = parse_input(body.get("input"))
    if problem is None and items is None:
        problem = "input: Input should be a valid string"
    if problem is not None or items is None:
        return error(400, problem or "Input cannot be empty")
    if not sim.opts.is_embedding:
        return error(400, NOT_EMBEDDING)
    model_path = sim.opts.model_dir or sim.opts.model_name
    call = checked_call(sim, items, body, f"'{model_path}'", EMBEDDING_DIALECT)
    if isinstance(call, web.Response):
        return call
    dimensions = body.get("dimensions")
    rid = body.get("rid") if isinstance(body.get("rid"), str) else request.headers.get("X-Request-Id", "embd")
    await call.run(sim, request.path, rid)
    data = [
        {"embedding": hashed_vector(one, sim.opts.embedding_dim, dimensions), "index": index, "object": "embedding"}
        for index, one in enumerate(call.ids)
    ]
    usage = {**usage_counts(call.prompt_tokens, 0), "prompt_tokens_details": None, "reasoning_tokens": 0}
    return json_response(200, {"data": data, "model": model_path, "object": "list", "usage": usage})
