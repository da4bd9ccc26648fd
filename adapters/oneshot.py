"""The contract of the one-shot calls (they generate nothing): embeddings, tokenize,
detokenize. One request in, one typed result out; a runtime declares them in its
`Capabilities` (`embeddings`, `tokenize`, which covers detokenize too), and cancelling
the coroutine aborts the upstream work as for a generation. Vectors come back as floats
whatever the client asked: the gateway writes `float` or `base64` itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class EmbeddingRequest:
    """`inputs`: each item is a text or a list of token ids (OpenAI's four `input`
    forms, flattened by the gateway: one string is one item, one token list one item).
    `request_id` is the gateway's own, as for a generation."""

    request_id: str
    model: str
    inputs: list[str] | list[list[int]]
    dimensions: int | None = None
    user: str | None = None
    tenant: str | None = None
    priority: int = 0


@dataclass(slots=True)
class EmbeddingResult:
    """One vector per input, in input order, and the prompt tokens the runtime counted
    (None: it did not say; the gateway's estimate stands in)."""

    vectors: list[list[float]]
    prompt_tokens: int | None


@dataclass(slots=True)
class TokenizeRequest:
    """vLLM's `/tokenize` request: a `prompt`, or chat `messages` rendered by the model's
    chat template. `add_special_tokens` None means the runtime's default for the form
    (true for a prompt, false for messages, whose template adds them)."""

    request_id: str
    model: str
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    return_token_strs: bool = False
    tenant: str | None = None  # whose share of the runtime's text work it takes (adapters/native_work.py)

    @property
    def special_tokens(self) -> bool:
        """`add_special_tokens` as the runtime reads it."""
        if self.add_special_tokens is not None:
            return self.add_special_tokens
        return self.messages is None


@dataclass(slots=True)
class TokenizeResult:
    tokens: list[int]
    max_model_len: int
    token_strs: list[str] | None = None


@dataclass(slots=True)
class DetokenizeRequest:
    request_id: str
    model: str
    tokens: list[int]
    tenant: str | None = None


@dataclass(slots=True)
class DetokenizeResult:
    prompt: str
