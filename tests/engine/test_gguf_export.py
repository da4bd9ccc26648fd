"""engine/gguf_export.py: the two choices parity with llama.cpp rests on, checked without
llama.cpp (the real comparison is tests/parity), and the written file read back with
the `gguf` package of the llama.cpp tier (marker `llamacpp`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import regex
from tokenizers import Tokenizer

from engine.gguf_export import PRE_TOKENIZER, permute_rows, read_vocab
from engine.make_tiny import make_tiny

# llama.cpp's `starcoder` pre-tokenizer (src/llama-vocab.cpp): each regex splits every
# piece the previous one left, keeping what it did not match as pieces of their own.
STARCODER = [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"]
TEXTS = [
    "Hello world 42, it's  fine\n\nok",
    "Numbers: 0 1 2 3 1024 -7 3.14 1e-6 2024-01-31 12:30:45",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    'def main():\n    print("hello")\n    return 0\n',
    "Café, naïve, über, été, 你好, こんにちは, 😀 are non-ASCII   words.\t\ttabs \r\n",
    "  leading and trailing spaces   ",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("gguf") / "tiny", seed=0)


def llamacpp_split(text: str) -> list[str]:
    pieces = [text]
    for pattern in STARCODER:
        out = []
        for piece in pieces:
            pos = 0
            for m in regex.finditer(pattern, piece):
                if m.start() > pos:
                    out.append(piece[pos : m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(piece):
                out.append(piece[pos:])
        pieces = out
    return pieces


def byte_level(text: str) -> str:
    """GPT-2's byte-to-character map, as byte-level BPE writes its tokens."""
    visible = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in visible:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return "".join(table[b] for b in text.encode("utf-8"))


def test_the_starcoder_pre_tokenizer_splits_as_make_tinys_tokenizer(tiny: Path) -> None:
    assert PRE_TOKENIZER == "starcoder"
    hf = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    for text in TEXTS:
        theirs = [byte_level(p) for p in llamacpp_split(text)]
        assert theirs == [p for p, _ in hf.pre_tokenizer.pre_tokenize_str(text)], text


def rope_halves(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """HF's rotary embedding: dimension i turns with i + d/2 (`rotate_half`)."""
    half = x.shape[-1] // 2
    cos, sin = np.cos(np.concatenate([theta, theta])), np.sin(np.concatenate([theta, theta]))
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def rope_pairs(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """llama.cpp's `llama` (NORM) rope: dimensions 2i and 2i+1 turn together."""
    out = x.copy()
    a, b = x[..., 0::2], x[..., 1::2]
    out[..., 0::2] = a * np.cos(theta) - b * np.sin(theta)
    out[..., 1::2] = a * np.sin(theta) + b * np.cos(theta)
    return out


def test_permuted_q_and_k_give_llamacpps_rope_the_same_attention_scores() -> None:
    rng = np.random.default_rng(0)
    heads, head_dim, hidden = 2, 64, 128
    wq, wk = rng.normal(size=(heads * head_dim, hidden)), rng.normal(size=(heads * head_dim, hidden))
    x1, x2 = rng.normal(size=hidden), rng.normal(size=hidden)
    freqs = 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)

    def scores(q_w, k_w, rope) -> np.ndarray:
        q = rope((q_w @ x1).reshape(heads, head_dim), 5 * freqs)  # position 5 attends to 2
        k = rope((k_w @ x2).reshape(heads, head_dim), 2 * freqs)
        return (q * k).sum(-1)

    hf = scores(wq, wk, rope_halves)
    assert np.allclose(scores(permute_rows(wq, heads), permute_rows(wk, heads), rope_pairs), hf)
    assert not np.allclose(scores(wq, wk, rope_pairs), hf)  # unpermuted, llama.cpp would differ


def test_the_vocabulary_keeps_ids_and_marks_special_and_tool_tokens(tiny: Path) -> None:
    tokens, types, merges = read_vocab(json.loads((tiny / "tokenizer.json").read_text()))
    hf = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    assert tokens == [hf.id_to_token(i) for i in range(hf.get_vocab_size())]
    assert types[hf.token_to_id("<|im_end|>")] == 3 and types[hf.token_to_id("<tool_call>")] == 4
    assert types[hf.token_to_id("Ġthe")] == 1 and merges and all(m.count(" ") == 1 for m in merges)


@pytest.mark.llamacpp
def test_the_written_file_reads_back_with_llamacpps_gguf_package(tiny: Path, tmp_path: Path) -> None:
    from processes.llamacpp import GGUF_PY, write_gguf

    out = write_gguf(tiny, tmp_path / "tiny.gguf")
    check = (
        "import sys, gguf; r = gguf.GGUFReader(sys.argv[1]); "
        "f = lambda k: r.fields[k].contents(); "
        "print(f('general.architecture'), f('tokenizer.ggml.pre'), f('llama.context_length'), "
        "len(r.tensors), {t.tensor_type.name for t in r.tensors})"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, str(out)],
        env={**os.environ, "PYTHONPATH": str(GGUF_PY)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split(" ", 4) == ["llama", "starcoder", "4096", "21", "{'F32'}\n"]
