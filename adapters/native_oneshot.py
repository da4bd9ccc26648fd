"""The native engine's one-shot calls: embeddings, tokenize, detokenize.

`NativeOneShot` gives the native adapter (adapters/native.py) its `embed`,
`tokenize` and `detokenize`: the text side of them, on the adapter's engine
(`engine.async_engine.AsyncEngine`) and tokenizer (`engine.text.tokenizer.TextTokenizer`),
which it only uses (only adapters/native.py imports the engine).
Texts are tokenized as vLLM does for each call: embedding inputs with special tokens,
`/tokenize` prompts with them unless told otherwise, chat messages through the model's
chat template without them (the template writes its own).
"""

from __future__ import annotations

from typing import Any

from adapters.errors import GatewayError, invalid_request
from adapters.oneshot import (
    DetokenizeRequest,
    DetokenizeResult,
    EmbeddingRequest,
    EmbeddingResult,
    TokenizeRequest,
    TokenizeResult,
)

# What `chat_template_kwargs` may not override: the call's own arguments.
_TEMPLATE_ARGUMENTS = {"messages", "tools", "add_generation_prompt", "continue_final_message"}


class NativeOneShot:
    """The native adapter's `embed`, `tokenize` and `detokenize` (the engine loads first)."""

    tokenizer: Any
    async_engine: Any

    async def start(self) -> None:
        raise NotImplementedError  # NativeAdapter.start loads the model

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        await self.start()
        return await embed(self.async_engine, self.tokenizer, request)

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        await self.start()
        return tokenize(self.tokenizer, self.async_engine.engine.max_model_len, request)

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResult:
        await self.start()
        return detokenize(self.tokenizer, request)


async def embed(engine: Any, tokenizer: Any, request: EmbeddingRequest) -> EmbeddingResult:
    """The engine's last-token pooling (engine/pooling.py); cancelling stops it between passes."""
    prompts = [
        list(item) if isinstance(item, list) else tokenizer.encode(item, add_special_tokens=True)
        for item in request.inputs
    ]
    try:
        vectors = await engine.embed(prompts, request.dimensions)
    except ValueError as exc:  # engine.pooling.PoolingInputError names the field and, for length, the code
        raise GatewayError(
            400, str(exc), param=getattr(exc, "param", "input"), code=getattr(exc, "code", None)
        ) from exc
    return EmbeddingResult(vectors, sum(len(p) for p in prompts))


def tokenize(tokenizer: Any, max_model_len: int, request: TokenizeRequest) -> TokenizeResult:
    if request.messages is None:
        text = request.prompt or ""
    else:
        text = _render(tokenizer, request)
    ids = tokenizer.encode(text, add_special_tokens=request.special_tokens)
    strs = [tokenizer.id_to_token(i) or "" for i in ids] if request.return_token_strs else None
    return TokenizeResult(ids, max_model_len, strs)


def _render(tokenizer: Any, request: TokenizeRequest) -> str:
    """The chat template's text. `continue_final_message` renders without the generation
    prompt and ends the text right after the last message's content, as transformers does."""
    extra = {k: v for k, v in request.chat_template_kwargs.items() if k not in _TEMPLATE_ARGUMENTS}
    messages = request.messages or []
    try:
        text = tokenizer.apply_chat_template(
            messages,
            tools=request.tools or None,
            add_generation_prompt=request.add_generation_prompt and not request.continue_final_message,
            **extra,
        )
    except ValueError as exc:  # engine.text.chat_template.ChatTemplateError
        raise invalid_request(str(exc), param="messages") from exc
    if not request.continue_final_message:
        return text
    final = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else None
    if not isinstance(final, str) or not final.strip() or final.strip() not in text:
        raise invalid_request(
            "continue_final_message needs a last message with text content to continue", param="messages"
        )
    stripped = final.strip()
    return text[: text.rindex(stripped) + len(stripped)]


def detokenize(tokenizer: Any, request: DetokenizeRequest) -> DetokenizeResult:
    vocab = tokenizer.vocab_size
    for token in request.tokens:
        if not 0 <= token < vocab:
            raise invalid_request(f"token id {token} is outside the vocabulary [0, {vocab})", param="tokens")
    return DetokenizeResult(tokenizer.decode(request.tokens, skip_special_tokens=False))
