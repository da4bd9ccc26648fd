"""Incremental detokenization never emits broken UTF-8 and adds up to the full decode."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.make_tiny import make_tiny
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.tokenizer import TextTokenizer

MULTIBYTE = "a\u00e9\u4f60\u597d\U0001f600 \u3053\u3093\u306b\u3061\u306f \u00fcber"


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    return TextTokenizer(make_tiny(tmp_path_factory.mktemp("detok") / "tiny"))


def stream(tok: TextTokenizer, ids: list[int], step: int = 1) -> list[str]:
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.add(ids[i : i + step]) for i in range(0, len(ids), step)]
    pieces.append(detok.flush())
    return pieces


def test_multibyte_characters_split_across_tokens_are_held_back(tok: TextTokenizer) -> None:
    ids = tok.encode(MULTIBYTE)
    assert len(ids) > len(MULTIBYTE.split())  # some characters do take several tokens
    pieces = stream(tok, ids)
    assert "".join(pieces) == MULTIBYTE
    assert not any("\ufffd" in p for p in pieces)
    assert "" in pieces  # at least one token completed no character on its own


@pytest.mark.parametrize("step", [1, 2, 3, 5])
def test_chunked_streaming_equals_full_decode(tok: TextTokenizer, step: int) -> None:
    text = 'Hello \U0001f600 world, caf\u00e9! {"k": [1, 2]} \u4f60\u597d'
    ids = tok.encode(text)
    assert "".join(stream(tok, ids, step)) == tok.decode(ids) == text


def test_special_tokens_are_skipped_but_tool_tags_kept(tok: TextTokenizer) -> None:
    ids = tok.encode("<tool_call>x</tool_call><|im_end|>")
    assert "".join(stream(tok, ids)) == "<tool_call>x</tool_call>"
    detok = IncrementalDetokenizer(tok, skip_special_tokens=False)
    assert detok.add(ids) + detok.flush() == "<tool_call>x</tool_call><|im_end|>"


def test_an_incomplete_character_at_the_end_becomes_a_replacement(tok: TextTokenizer) -> None:
    ids = tok.encode("ok\U0001f600")
    detok = IncrementalDetokenizer(tok)
    assert detok.add(ids[:-1]) == "ok"
    assert detok.flush() == "\ufffd"


@settings(max_examples=150, deadline=None)
@given(ids=st.lists(st.integers(min_value=0, max_value=511), max_size=40))
def test_random_token_sequences_match_the_full_decode(tok: TextTokenizer, ids: list[int]) -> None:
    # Random ids make invalid byte sequences too; the pieces must still never
    # split a character and must add up to what a full decode shows.
    pieces = stream(tok, ids)
    assert "".join(pieces) == tok.decode(ids)
    for piece in pieces:
        piece.encode("utf-8")  # each piece is whole characters (no lone surrogates)


def _sentencepiece_style_dir(path: Path) -> Path:
    """A Llama-2/Mistral-style tokenizer.json: Metaspace-like normalizer, <0xNN> byte fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in ["\u2581", "h", "e", "l", "o", "\u00e9", "r", "d"]:
        vocab[piece] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.add_special_tokens(["<s>", "</s>"])
    path.mkdir()
    tokenizer.save(str(path / "tokenizer.json"))
    return path


def test_byte_fallback_tokenizers_stream_whole_characters(tmp_path: Path) -> None:
    tok = TextTokenizer(_sentencepiece_style_dir(tmp_path / "sp"))
    text = "hello w\u00f6rld \U0001f600 h\u00e9llo"
    ids = tok.encode(text)
    assert tok.id_to_token(ids[7]).startswith("<0x")  # "w" and "ö" fall back to bytes
    pieces = stream(tok, ids + [tok.token_to_id("</s>")])
    assert not any("\ufffd" in p for p in pieces)
    # A continuation keeps its leading space (the full decode strips the first one).
    assert "".join(pieces) == " " + tok.decode(ids) == " " + text
