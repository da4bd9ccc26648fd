"""The native engine's one-shot calls: embeddings, tokenize, detokenize, on the native
adapter's engine and tokenizer (only adapters/native.py imports the engine). Texts are
tokenized as vLLM does for each call; every text is capped by the model's context
before any work (`check_context`), and the work runs on the tenant's share of the
worker threads (adapters/native_work.py), never on the event loop.
"""

from __future__ import annotations

from typing import Any

from adapters.errors import GatewayError, context_length_exceeded, invalid_request
from adapters.native_work import TEXT_WORK
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
        tok, max_len = self.tokenizer, self.async_engine.engine.max_model_len
        for item in request.inputs:
            if isinstance(item, str):
                check_context(tok, max_len, _utf8_bytes(item), param="input")
        prompts = await TEXT_WORK.run(request.tenant, lambda: encode_inputs(tok, request))
        return await embed(self.async_engine, prompts, request)

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        await self.start()
        tok, max_len = self.tokenizer, self.async_engine.engine.max_model_len
        text_bytes = _utf8_bytes(request.prompt or "") + sum(_content_bytes(m) for m in request.messages or [])
        check_context(tok, max_len, text_bytes, param="messages" if request.messages is not None else "prompt")
        return await TEXT_WORK.run(request.tenant, lambda: tokenize(tok, max_len, request))

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResult:
        await self.start()
        tok = self.tokenizer
        return await TEXT_WORK.run(request.tenant, lambda: detokenize(tok, request))


def _utf8_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _content_bytes(message: Any) -> int:
    """The text bytes of one chat message (its string content, or its parts' text)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return _utf8_bytes(content)
    if isinstance(content, list):
        return sum(_utf8_bytes(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0


def request_text_bytes(request: Any) -> int:
    """The bytes of text a generation request's prompt holds (token ids: 0)."""
    if request.messages is not None:
        return sum(_content_bytes(m) for m in request.messages)
    return _utf8_bytes(request.prompt) if isinstance(request.prompt, str) else 0


def check_context(tokenizer: Any, max_model_len: int, text_bytes: int, param: str = "messages") -> None:
    """400 context_length_exceeded, without tokenizing, for a text whose bytes alone make
    more tokens than the model's context (no token stands for more than
    `max_token_bytes`): a 4 MB prompt is refused in microseconds, not after seconds of work."""
    fewest = text_bytes // tokenizer.max_token_bytes
    if fewest > max_model_len:
        error = context_length_exceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, your input holds "
            f"{text_bytes} bytes of text, at least {fewest} tokens. Please reduce its length."
        )
        error.param = param
        raise error


def encode_inputs(tokenizer: Any, request: EmbeddingRequest) -> list[list[int]]:
    return [
        list(item) if isinstance(item, list) else tokenizer.encode(item, add_special_tokens=True)
        for item in request.inputs
    ]


async def embed(engine: Any, prompts: list[list[int]], request: EmbeddingRequest) -> EmbeddingResult:
    """The engine's last-token pooling (engine/pooling.py); cancelling stops it between passes."""
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
