"""The doubles' tokenizer, behind the tokenize and embeddings endpoints.

With the synthetic source, `WordTokenizer`: one token per whitespace-separated word,
the rule the synthetic source counts prompts by (README, "Synthetic prompt-token
rule"), so `/tokenize` counts what usage reports. Words of the synthetic vocabulary
keep the ids generated tokens have; other words get an id from a hash, remembered so
`/detokenize` can give them back. It has no special tokens. With the engine source,
`ModelTokenizer`: the model's own tokenizer and chat template.
"""

from __future__ import annotations

import zlib
from typing import Any

from simulators.request import content_text, render_chat_plain
from simulators.tokens import EOS_TOKEN_ID, VOCAB_OFFSET, VOCABULARY

WORD_VOCAB_SIZE = 1 << 20
_HASHED_FROM = 1000  # ids below are the synthetic vocabulary's (and EOS)
_REMEMBERED = 1 << 16  # hashed words kept for detokenize


class WordTokenizer:
    vocab_size = WORD_VOCAB_SIZE

    def __init__(self) -> None:
        self._known = {word: VOCAB_OFFSET + i for i, word in enumerate(VOCABULARY)}
        self._words = {i: word for word, i in self._known.items()}

    def word_id(self, word: str) -> int:
        known = self._known.get(word)
        if known is not None:
            return known
        token = _HASHED_FROM + zlib.crc32(word.encode()) % (WORD_VOCAB_SIZE - _HASHED_FROM)
        if len(self._words) < _REMEMBERED:
            self._words.setdefault(token, word)
        return token

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.word_id(w) for w in text.split()]

    def encode_chat(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tools: Any = None
    ) -> list[int]:
        """One token per message for its role marker, one per word, one for the generation prompt."""
        words: list[str] = []
        for message in messages:
            words.append(f"<{message.get('role', '')}>")
            words.extend(content_text(message.get("content")).split())
        if add_generation_prompt:
            words.append("<assistant>")
        return [self.word_id(w) for w in words]

    def token_strs(self, ids: list[int]) -> list[str]:
        return [self._words.get(i, "") for i in ids]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(self._words.get(i, "") for i in ids if i != EOS_TOKEN_ID)


class ModelTokenizer:
    """The engine source's `TextTokenizer` (engine/text/tokenizer.py) behind the same calls."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.vocab_size = tokenizer.vocab_size

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.tok.encode(text, add_special_tokens=add_special_tokens)

    def encode_chat(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tools: Any = None
    ) -> list[int]:
        try:
            text = self.tok.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        except ValueError:
            text = render_chat_plain(messages)
        return self.tok.encode(text)

    def token_strs(self, ids: list[int]) -> list[str]:
        return [self.tok.id_to_token(i) or "" for i in ids]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


SimTokenizer = WordTokenizer | ModelTokenizer
