"""Incremental detokenization that never emits a broken UTF-8 character.

Byte-level BPE splits multi-byte characters across tokens (an emoji can take
four tokens). Each token's exact bytes (TextTokenizer.token_bytes) go through an
incremental UTF-8 decoder, which holds back an incomplete sequence until the
bytes that complete it arrive; bytes that can never form a character become
U+FFFD, as a full decode would show them.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

from engine.text.tokenizer import TextTokenizer


class IncrementalDetokenizer:
    """Turns one sequence's generated token ids into text, a piece at a time."""

    def __init__(self, tokenizer: TextTokenizer, *, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip = tokenizer.special_ids if skip_special_tokens else frozenset()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token_ids: Iterable[int]) -> str:
        """The text that `token_ids` complete (possibly "" while a character is split)."""
        data = bytearray()
        for token_id in token_ids:
            if token_id not in self._skip:
                data += self._tokenizer.token_bytes(token_id)
        return self._decoder.decode(bytes(data)) if data else ""

    def flush(self) -> str:
        """At the end of the sequence: held-back bytes of a character that never completed, as U+FFFD."""
        return self._decoder.decode(b"", final=True)
