"""Chat `logprobs` for the doubles. The values are synthetic (a fixed function of
the token id, alternatives from the synthetic vocabulary); the shapes are each
runtime's: `{"content":[{"token","logprob","bytes","top_logprobs":[...]}]}`, without
`bytes` for TGI; legacy completions use the parallel lists of `completion()`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulators.tokens import EOS_TOKEN_ID, VOCABULARY


@dataclass(frozen=True, slots=True)
class Asked:
    """The logprobs one request asked for, in its runtime's shape."""

    chat: bool  # chat `logprobs: true`
    top_n: int  # chat `top_logprobs`
    completion_top: int | None  # legacy completions' integer `logprobs`; None: not asked
    with_bytes: bool  # chat entries carry `bytes` (not on TGI)

    @classmethod
    def of(cls, body: dict[str, Any], kind: str, with_bytes: bool = True) -> Asked:
        chat, top_n = requested(body)
        return cls(chat, top_n, completion_requested(body) if kind == "completion" else None, with_bytes)

    def for_chat(self, texts: list[str], token_ids: list[int]) -> dict[str, Any] | None:
        return content(texts, token_ids, self.top_n, self.with_bytes) if self.chat else None

    def for_completion(self, texts: list[str], token_ids: list[int]) -> dict[str, Any] | None:
        return completion(texts, token_ids, self.completion_top) if self.completion_top is not None else None


def requested(body: dict[str, Any]) -> tuple[bool, int]:
    """(whether chat logprobs were asked for, how many alternatives per token)."""
    top = body.get("top_logprobs")
    return body.get("logprobs") is True, top if isinstance(top, int) and not isinstance(top, bool) and top > 0 else 0


def _logprob(token_id: int) -> float:
    return -round(0.05 + (token_id % 17) / 10, 4)


def entry(text: str, token_id: int, top_n: int, with_bytes: bool) -> dict[str, Any]:
    def item(token: str, logprob: float) -> dict[str, Any]:
        out: dict[str, Any] = {"token": token, "logprob": logprob}
        if with_bytes:
            out["bytes"] = list(token.encode())
        return out

    logprob = _logprob(token_id)
    first = item(text, logprob)
    alternatives = [
        item(" " + VOCABULARY[(token_id + k) % len(VOCABULARY)], round(logprob - 0.5 * k, 4)) for k in range(1, top_n)
    ]
    return {**first, "top_logprobs": ([item(text, logprob)] + alternatives)[:top_n]}


def content(texts: list[str], token_ids: list[int], top_n: int, with_bytes: bool) -> dict[str, Any]:
    """A whole answer's logprobs; the EOS token is not listed (it has no text)."""
    return {"content": [entry(t, i, top_n, with_bytes) for t, i in zip(texts, token_ids) if i != EOS_TOKEN_ID]}


def completion_requested(body: dict[str, Any]) -> int | None:
    """Legacy completions ask with an integer `logprobs` (alternatives per token); None: not asked."""
    value = body.get("logprobs")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def completion(texts: list[str], token_ids: list[int], top_n: int, offset: int = 0) -> dict[str, Any]:
    """The legacy completions shape: parallel lists, `top_logprobs` as token -> logprob maps."""
    pairs = [(t, i) for t, i in zip(texts, token_ids) if i != EOS_TOKEN_ID]
    offsets, at = [], offset
    for text, _ in pairs:
        offsets.append(at)
        at += len(text)
    tops = []
    for text, token_id in pairs:
        e = entry(text, token_id, max(top_n, 1), False)
        tops.append({alt["token"]: alt["logprob"] for alt in e["top_logprobs"][: max(top_n, 1)]})
    return {
        "text_offset": offsets,
        "token_logprobs": [_logprob(i) for _, i in pairs],
        "tokens": [t for t, _ in pairs],
        "top_logprobs": tops,
    }
