"""The wire of the one-shot calls, for OpenAI-compatible runtimes: request
bodies and answer decoding for `/v1/embeddings` (OpenAI's shape, which vLLM and SGLang
serve), and vLLM's and SGLang's `/tokenize` and `/detokenize` (docs/runtimes.md).

Answers are checked, not trusted: a vector count that does not match the inputs, or a
body of the wrong shape, is the backend's failure (502), never a short answer."""

from __future__ import annotations

import base64
import struct
import sys
from typing import Any

from adapters.errors import GatewayError, upstream_failed
from adapters.oneshot import (
    DetokenizeRequest,
    DetokenizeResult,
    EmbeddingRequest,
    EmbeddingResult,
    TokenizeRequest,
    TokenizeResult,
)

# ---- /v1/embeddings ------------------------------------------------------------------


def embedding_body(request: EmbeddingRequest, served_model: str | None) -> dict[str, Any]:
    """Always `float`: every runtime honours it (SGLang ignores `encoding_format`), and the
    gateway writes base64 itself when the client asked for it."""
    body: dict[str, Any] = {
        "model": served_model or request.model,
        "input": request.inputs,
        "encoding_format": "float",
    }
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    if request.user is not None:
        body["user"] = request.user
    return body


def decode_embeddings(payload: Any, count: int, backend: str) -> EmbeddingResult:
    """`{"data": [{"index", "embedding"}], "usage": {"prompt_tokens"}}` -> one vector per
    input, in input order. An embedding sent as base64 (little-endian float32, as OpenAI
    and vLLM write it) is read too."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) != count:
        got = len(data) if isinstance(data, list) else "no"
        raise upstream_failed(backend, f"it answered {got} embeddings for {count} inputs")
    vectors: list[list[float] | None] = [None] * count
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, dict) else None
        vector = _vector(item.get("embedding") if isinstance(item, dict) else None)
        if not isinstance(index, int) or not 0 <= index < count or vectors[index] is not None or vector is None:
            raise upstream_failed(
                backend, "it answered an embedding list of the wrong shape", internal=repr(item)[:200]
            )
        vectors[index] = vector
    usage = payload.get("usage")
    prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return EmbeddingResult(
        [v for v in vectors if v is not None],
        prompt_tokens if isinstance(prompt_tokens, int) and not isinstance(prompt_tokens, bool) else None,
    )


def _vector(value: Any) -> list[float] | None:
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            return None
        if len(raw) % 4:
            return None
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    if isinstance(value, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        return [float(x) for x in value]
    return None


def embedding_error(err: GatewayError) -> GatewayError:
    """A runtime's refusal named by the request field it is about: vLLM and SGLang refuse
    `dimensions` for a model without Matryoshka training with `param: null`, and a too long
    input is about `input`, not `messages`."""
    if err.status != 400:
        return err
    if err.code == "context_length_exceeded":
        err.param = "input"
    elif err.param is None and ("matryoshka" in err.message.lower() or "dimensions" in err.message.lower()):
        err.param = "dimensions"
    return err


# ---- /tokenize, /detokenize (vLLM's shape; SGLang's differs as noted) -----------------


def tokenize_body(request: TokenizeRequest, served_model: str | None) -> dict[str, Any]:
    """vLLM's TokenizeCompletionRequest or TokenizeChatRequest (serve/tokenize/protocol.py)."""
    body: dict[str, Any] = {"model": served_model or request.model}
    if request.messages is None:
        body["prompt"] = request.prompt
    else:
        body["messages"] = request.messages
        body["add_generation_prompt"] = request.add_generation_prompt
        body["continue_final_message"] = request.continue_final_message
        if request.tools:
            body["tools"] = request.tools
        if request.chat_template_kwargs:
            body["chat_template_kwargs"] = request.chat_template_kwargs
    body["add_special_tokens"] = request.special_tokens
    if request.return_token_strs:
        body["return_token_strs"] = True
    return body


def decode_tokenize(payload: Any, backend: str, want_strs: bool) -> TokenizeResult:
    """`{"count", "max_model_len", "tokens", "token_strs"?}` (vLLM; SGLang has no token_strs)."""
    tokens = payload.get("tokens") if isinstance(payload, dict) else None
    max_len = payload.get("max_model_len") if isinstance(payload, dict) else None
    if not isinstance(tokens, list) or not _ids(tokens) or not isinstance(max_len, int):
        raise upstream_failed(backend, "its tokenize answer has the wrong shape", internal=repr(payload)[:200])
    strs = payload.get("token_strs") if want_strs else None
    if want_strs and not (
        isinstance(strs, list) and len(strs) == len(tokens) and all(isinstance(s, str) for s in strs)
    ):
        raise upstream_failed(backend, "its tokenize answer lacks the token strings", internal=repr(payload)[:200])
    # SGLang reports the tokenizer's model_max_length, which is a huge sentinel when unset.
    return TokenizeResult(list(tokens), min(max_len, sys.maxsize), strs)


def detokenize_body(request: DetokenizeRequest, served_model: str | None) -> dict[str, Any]:
    return {"model": served_model or request.model, "tokens": request.tokens}


def decode_detokenize(payload: Any, backend: str, key: str) -> DetokenizeResult:
    """`{"prompt": str}` (vLLM) or `{"text": str}` (SGLang)."""
    text = payload.get(key) if isinstance(payload, dict) else None
    if not isinstance(text, str):
        raise upstream_failed(backend, "its detokenize answer has the wrong shape", internal=repr(payload)[:200])
    return DetokenizeResult(text)


def _ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
