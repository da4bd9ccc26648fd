"""engine/structured/vocab.py: what the grammar engine is told of a vocabulary (each
token's bytes, padded ids never allowed, the special and eos ids, how text is encoded)
and the one tokenizer built per model directory, size and stop ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.make_tiny import make_tiny
from engine.structured import vocab
from engine.structured.vocab import _TokenSource, grammar_tokenizer
from engine.text.tokenizer import TextTokenizer


class _FakeTok:
    vocab_size = 4
    special_ids = frozenset({3})
    eos_token_ids = [3, 2]
    model_dir = Path("/nowhere")

    def __init__(self):
        self.encoded: list[tuple[str, bool]] = []

    def token_bytes(self, i: int) -> bytes:
        return f"t{i}".encode()

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.encoded.append((text, add_special_tokens))
        return [len(text)]


def test_token_source_pads_past_the_tokenizer_with_never_allowed_ids():
    source = _TokenSource(_FakeTok(), 6)
    assert source.tokens == [b"t0", b"t1", b"t2", b"t3", b"", b""]
    assert source.special_token_ids == [3, 4, 5]
    assert source.eos_token_id == 2
    assert source.bos_token_id is None


def test_token_source_without_padding():
    source = _TokenSource(_FakeTok(), 4)
    assert source.tokens == [b"t0", b"t1", b"t2", b"t3"]
    assert source.special_token_ids == [3]


def test_token_source_encodes_text_and_bytes_without_special_tokens():
    tok = _FakeTok()
    source = _TokenSource(tok, 4)
    assert source("abc") == [3]
    assert source(b"ab\xff") == [3]
    assert tok.encoded == [("abc", False), ("ab\ufffd", False)]


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    return TextTokenizer(make_tiny(tmp_path_factory.mktemp("vocab") / "tiny"))


def test_one_grammar_tokenizer_per_directory_size_and_stop_ids(tok, monkeypatch):
    monkeypatch.setattr(vocab, "_cache", {})
    eos = set(tok.eos_token_ids)
    first = grammar_tokenizer(tok, tok.vocab_size, eos)
    assert grammar_tokenizer(tok, tok.vocab_size, set(eos)) is first
    assert grammar_tokenizer(tok, tok.vocab_size + 8, eos) is not first
    assert grammar_tokenizer(tok, tok.vocab_size, eos | {5}) is not first
    assert len(vocab._cache) == 3
    key = (str(Path(tok.model_dir).resolve()), tok.vocab_size, tuple(sorted(eos)))
    assert vocab._cache[key] is first


def test_the_grammar_vocabulary_covers_every_logits_column_and_never_less_than_the_tokenizer(tok, monkeypatch):
    monkeypatch.setattr(vocab, "_cache", {})
    eos = set(tok.eos_token_ids)
    assert grammar_tokenizer(tok, tok.vocab_size + 8, eos).vocab_size == tok.vocab_size + 8
    assert grammar_tokenizer(tok, tok.vocab_size - 2, eos).vocab_size == tok.vocab_size


def test_the_stop_ids_are_the_grammars_end(tok, monkeypatch):
    monkeypatch.setattr(vocab, "_cache", {})
    eos = sorted(tok.eos_token_ids)
    lltok = grammar_tokenizer(tok, tok.vocab_size, set(eos))
    assert lltok.eos_token == eos[0]


def test_the_engines_stop_ids_not_the_tokenizers_end_the_grammar(tok, monkeypatch):
    monkeypatch.setattr(vocab, "_cache", {})
    assert 5 not in tok.eos_token_ids
    assert grammar_tokenizer(tok, tok.vocab_size, {5, 9}).eos_token == 5
