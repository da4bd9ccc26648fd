"""What a request's prompt may cost in tokens, bounded from above: what admission
reserves against the tenant's tokens per minute (the runtime's count is charged at the
end, policies/quota.py). A bound, not an estimate: a reservation below the real count
lets a tenant spend past its limit before the count arrives. Every tokenizer the
runtimes ship writes at least one byte of text per token, so a text's UTF-8 bytes bound
its tokens, plus a few per message and per prompt for the template and special tokens
(docs/architecture.md, "Tenancy").
"""

from __future__ import annotations

from typing import Any

import orjson

from adapters.base import GenerationRequest

# Tokens a chat template may add around one message (role markers, separators).
TEMPLATE_TOKENS_PER_MESSAGE = 8
# Special tokens around a whole prompt (BOS, EOS, the generation prompt).
SPECIAL_TOKENS_PER_PROMPT = 4


def text_token_bound(text: str) -> int:
    """At most this many tokens: the text's UTF-8 bytes (ASCII counted without a copy)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _value_bound(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return text_token_bound(value)
    return len(orjson.dumps(value))  # content parts, tool calls: their JSON's bytes bound their text


def prompt_token_bound(req: GenerationRequest) -> int:
    """The prompt tokens `req` can cost at most (token-id prompts: their length)."""
    if req.messages is not None:
        total = SPECIAL_TOKENS_PER_PROMPT + _value_bound(req.tools) if req.tools else SPECIAL_TOKENS_PER_PROMPT
        for m in req.messages:
            total += TEMPLATE_TOKENS_PER_MESSAGE + _value_bound(m.get("content")) + _value_bound(m.get("tool_calls"))
        return total
    if isinstance(req.prompt, list):
        return len(req.prompt)
    return text_token_bound(req.prompt or "") + SPECIAL_TOKENS_PER_PROMPT


def requests_token_bound(reqs: list[GenerationRequest]) -> int:
    """The prompts of one request (a batched legacy completion's several) together."""
    return sum(prompt_token_bound(r) for r in reqs)


def inputs_token_bound(items: list[str] | list[list[int]] | list[Any]) -> int:
    """Embedding (or tokenize) inputs: token ids counted exactly, texts by their bound."""
    return sum(len(i) if isinstance(i, list) else text_token_bound(i) + SPECIAL_TOKENS_PER_PROMPT for i in items)
