"""The grammar engine's view of a model's vocabulary.

llguidance is given each token's exact bytes from our own TextTokenizer rather than
the tokenizer.json: read from tokenizer.json it treats every *added* token as special,
so a non-special added token such as the hermes `<tool_call>` tag could never be
sampled inside a grammar.
"""

from __future__ import annotations

import threading
from pathlib import Path

import llguidance

from engine.text.tokenizer import TextTokenizer


class _TokenSource:
    """What llguidance.TokenizerWrapper reads: token bytes, special ids, eos, encode."""

    def __init__(self, tok: TextTokenizer, vocab_size: int) -> None:
        self._tok = tok
        filler = b""  # ids past the tokenizer (padded embedding rows) are never allowed
        self.tokens = [tok.token_bytes(i) if i < tok.vocab_size else filler for i in range(vocab_size)]
        padded = list(range(tok.vocab_size, vocab_size))
        self.special_token_ids = sorted(set(tok.special_ids) | set(padded))
        self.eos_token_id = min(tok.eos_token_ids)
        self.bos_token_id = None

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tok.encode(text, add_special_tokens=False)


_cache: dict[tuple[str, int, tuple[int, ...]], llguidance.LLTokenizer] = {}
_lock = threading.Lock()


def grammar_tokenizer(tok: TextTokenizer, vocab_size: int, eos_token_ids: set[int]) -> llguidance.LLTokenizer:
    """The llguidance tokenizer for a model directory (built once per process).

    `vocab_size` is the model's (masks must cover every logits column, which may be
    more than the tokenizer knows); `eos_token_ids` are the engine's stop ids, the
    only tokens allowed once a grammar is complete.
    """
    key = (str(Path(tok.model_dir).resolve()), vocab_size, tuple(sorted(eos_token_ids)))
    with _lock:
        cached = _cache.get(key)
        if cached is None:
            source = _TokenSource(tok, max(vocab_size, tok.vocab_size))
            cached = llguidance.LLTokenizer(
                llguidance.TokenizerWrapper(source), n_vocab=len(source.tokens), eos_token=sorted(eos_token_ids)
            )
            _cache[key] = cached
        return cached
