"""TextTokenizer tokenizes as transformers' AutoTokenizer (and so vLLM) does, also where the
tokenizer class rebuilds tokenizer.json's pipeline (issue 13 item 9).

The tests build their own tiny tokenizers (nothing is downloaded): a byte-level BPE as
Qwen2 and Llama 3 ship it, but with a plain ByteLevel pre-tokenizer (so digits group),
and a SentencePiece-style BPE as Llama 2 and Mistral ship it (Prepend/Replace
normalizer, byte-fallback tokens, Strip decoder, a `<s>` template). Each is paired with
model types and tokenizer_config.json settings, and every case is compared with
AutoTokenizer on strings with digits, spaces, newlines, unicode and special tokens.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from adapters.base import GenerationRequest, SamplingParams, TextDelta, Usage
from adapters.native import NativeAdapter
from engine.text.tokenizer import TextTokenizer
from tests.engine.conftest import build_tiny_model, hf_greedy

CORPUS = [
    "Numbers 0123 and 4567, 0123 again; 1234 5678 90 12 123 2024.",
    "Hello world! Hello  world\n\nnew lines\r\n tabs\t here.",
    "Caf\u00e9 na\u00efve \u4f60\u597d \U0001f600 don't we'll I'm it's",
    "  leading spaces and trailing   ",
    "The quick brown fox jumps over the lazy dog 3.14159.",
] * 20

TEXTS = [
    "Numbers 0123",
    "x=12345678; y = 3.14159 and 2024",
    "Hello  world",
    " lead",
    "   three leading, two trailing  ",
    "line\nbreak\n\n\r\nand\ttab",
    "Caf\u00e9 e\u0301 na\u00efve \u4f60\u597d \U0001f600 \u00c5ngstr\u00f6m",  # e + combining accent: NFC differs
    "don't WE'LL it's",
    "",
    " ",
]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_TEXTS = [*TEXTS, "<|im_start|>user\nHi 42<|im_end|>\n<|im_start|>assistant\n", "a<|endoftext|> 7"]
LLAMA_TEXTS = [*TEXTS, "<s>Hi there</s> x", "[INST] 12 [/INST]"]


def byte_level_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=QWEN_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    spec = json.loads(tok.to_str())
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    return Tokenizer.from_str(json.dumps(spec))


def sentencepiece_bpe() -> Tokenizer:
    """Llama 2's tokenizer.json layout over a vocabulary trained here."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    spec = json.loads(tok.to_str())
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))])}
    for token, _ in sorted(spec["model"]["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    spec["model"].update(vocab=vocab, byte_fallback=True, fuse_unk=True, unk_token="<unk>")
    spec["added_tokens"] = [dict(a, id=vocab[a["content"]]) for a in spec["added_tokens"]]
    space = "\u2581"
    spec["normalizer"] = {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": space},
            {"type": "Replace", "pattern": {"String": " "}, "content": space},
        ],
    }
    spec["pre_tokenizer"] = None
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": space}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }
    return Tokenizer.from_str(json.dumps(spec))


def checkpoint(path: Path, tok: Tokenizer, model_type: str | None, tokenizer_config: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    added = {
        str(i): {
            "content": t.content,
            "special": t.special,
            "normalized": t.normalized,
            "lstrip": False,
            "rstrip": False,
            "single_word": False,
        }
        for i, t in tok.get_added_tokens_decoder().items()
    }
    (path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added, **tokenizer_config}))
    if model_type is not None and not (path / "config.json").exists():
        (path / "config.json").write_text(json.dumps({"model_type": model_type}))
    return path


QWEN_CONFIG = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
LLAMA_CONFIG = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def byte_level(case_id: str, model_type: str | None, pipeline: str, **config: object) -> tuple:
    """A case on a byte-level BPE file (Qwen2's special tokens, plus `config`)."""
    return (case_id, byte_level_bpe, model_type, {**QWEN_CONFIG, **config}, pipeline)


def sentencepiece(case_id: str, model_type: str, pipeline: str, **config: object) -> tuple:
    """A case on a SentencePiece-style file (Llama 2's special tokens, plus `config`)."""
    return (case_id, sentencepiece_bpe, model_type, {**LLAMA_CONFIG, **config}, pipeline)


# (id, tokenizer builder, model_type, tokenizer_config.json, the pipeline transformers runs)
CASES = [
    byte_level("qwen2-Qwen2Tokenizer", "qwen2", "qwen2", tokenizer_class="Qwen2Tokenizer"),
    byte_level("qwen2-Qwen2TokenizerFast", "qwen2", "qwen2", tokenizer_class="Qwen2TokenizerFast"),
    byte_level("qwen2-PreTrainedTokenizerFast", "qwen2", "qwen2", tokenizer_class="PreTrainedTokenizerFast"),
    byte_level("qwen2-no-class", "qwen2", "qwen2"),
    byte_level("qwen2-prefix-space", "qwen2", "qwen2", tokenizer_class="Qwen2Tokenizer", add_prefix_space=True),
    byte_level("qwen2-add-eos", "qwen2", "qwen2", tokenizer_class="Qwen2Tokenizer", add_eos_token=True),
    byte_level("llama-Qwen2Tokenizer", "llama", "qwen2", tokenizer_class="Qwen2Tokenizer"),
    byte_level("no-config-Qwen2Tokenizer", None, "qwen2", tokenizer_class="Qwen2Tokenizer"),
    # Llama 3: byte-level, declared as PreTrainedTokenizerFast or (wrongly) LlamaTokenizer.
    byte_level("llama3-PreTrainedTokenizerFast", "llama", "file", tokenizer_class="PreTrainedTokenizerFast"),
    byte_level("llama3-LlamaTokenizer", "llama", "file", tokenizer_class="LlamaTokenizerFast"),
    byte_level("llama3-bos", "llama", "file", bos_token="<|endoftext|>", add_bos_token=True),
    # Llama 2: SentencePiece-style file, declared LlamaTokenizer: the class rebuilds it.
    sentencepiece("llama2", "llama", "llama", tokenizer_class="LlamaTokenizer"),
    sentencepiece("llama2-fast", "llama", "llama", tokenizer_class="LlamaTokenizerFast"),
    sentencepiece("llama2-legacy", "llama", "llama", tokenizer_class="LlamaTokenizer", legacy=True),
    sentencepiece("llama2-no-prefix-space", "llama", "llama", tokenizer_class="LlamaTokenizer", add_prefix_space=False),
    sentencepiece(
        "llama2-bos-eos", "llama", "llama", tokenizer_class="LlamaTokenizer", add_bos_token=True, add_eos_token=True
    ),
    sentencepiece("llama2-PreTrainedTokenizerFast", "llama", "file", tokenizer_class="PreTrainedTokenizerFast"),
    # Mistral (v0.1-v0.3 layout): whatever the declared class, the file is used as it is.
    sentencepiece("mistral-LlamaTokenizer", "mistral", "file", tokenizer_class="LlamaTokenizer", legacy=False),
    sentencepiece("mistral-no-class", "mistral", "file"),
    sentencepiece("mistral-bos-eos", "mistral", "file", add_bos_token=True, add_eos_token=True),
]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def pair(request, tmp_path_factory: pytest.TempPathFactory):
    name, build, model_type, config, pipeline = request.param
    path = checkpoint(tmp_path_factory.mktemp("tk") / name, build(), model_type, config)
    hf = transformers.AutoTokenizer.from_pretrained(str(path))
    texts = QWEN_TEXTS if build is byte_level_bpe else LLAMA_TEXTS
    return TextTokenizer(path), hf, texts, pipeline


def test_the_pipeline_is_the_one_transformers_picks(pair) -> None:
    tok, hf, _, pipeline = pair
    assert tok.pipeline == pipeline
    assert (
        type(hf).__name__
        == {"qwen2": "Qwen2Tokenizer", "llama": "LlamaTokenizer", "file": "TokenizersBackend"}[pipeline]
    )


def test_encoding_matches_transformers(pair) -> None:
    tok, hf, texts, _ = pair
    for text in texts:
        assert tok.encode(text) == hf(text, add_special_tokens=False).input_ids, text
        assert tok.encode(text, add_special_tokens=True) == hf(text).input_ids, text


def test_decoding_matches_transformers(pair) -> None:
    tok, hf, texts, _ = pair
    for text in texts:
        ids = hf(text, add_special_tokens=True).input_ids
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True), text
        assert tok.decode(ids, skip_special_tokens=False) == hf.decode(ids), text


def test_token_bytes_rebuild_the_text(pair) -> None:
    # What incremental detokenization sees: each token's bytes, joined. A SentencePiece-style
    # decoder also strips the one leading space its "\u2581" stands for; bytes keep it.
    tok, hf, texts, _ = pair
    for text in texts:
        ids = hf(text, add_special_tokens=False).input_ids
        joined = b"".join(tok.token_bytes(i) for i in ids).decode("utf-8")
        expected = hf.decode(ids)
        assert joined == expected or (joined.startswith(" ") and joined[1:] == expected), text


def test_numbers_split_as_transformers_not_as_the_file(tmp_path: Path) -> None:
    """The issue's case: a Qwen2 checkpoint whose tokenizer.json groups digits."""
    path = checkpoint(
        tmp_path / "qwen2", byte_level_bpe(), "qwen2", {**QWEN_CONFIG, "tokenizer_class": "Qwen2Tokenizer"}
    )
    file_ids = Tokenizer.from_file(str(path / "tokenizer.json")).encode("Numbers 0123").ids
    ids = TextTokenizer(path).encode("Numbers 0123")
    assert ids == transformers.AutoTokenizer.from_pretrained(str(path))("Numbers 0123").input_ids
    assert ids != file_ids  # the file alone would not tokenize like vLLM
    assert [TextTokenizer(path).decode([i]) for i in ids[-4:]] == ["0", "1", "2", "3"]


def test_greedy_text_matches_transformers_on_a_qwen2_checkpoint(tmp_path: Path) -> None:
    """End to end: the prompt tokenized as transformers does, so greedy output is transformers' (vLLM's)."""
    tok = byte_level_bpe()
    path = tmp_path / "qwen2"
    model = build_tiny_model(
        path, "qwen2", vocab_size=tok.get_vocab_size(), num_heads=4, num_kv_heads=2, head_dim=16, tie=True, seed=1
    )
    checkpoint(path, tok, "qwen2", {**QWEN_CONFIG, "tokenizer_class": "Qwen2Tokenizer"})
    hf = transformers.AutoTokenizer.from_pretrained(str(path))
    prompt = "Numbers 0123 and 4567"
    prompt_ids = hf(prompt).input_ids
    expected = hf.decode(hf_greedy(model, prompt_ids, 10))

    async def run() -> list:
        adapter = NativeAdapter("qwen2", str(path), engine_options={"num_blocks": 32, "max_model_len": 256})
        sampling = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
        try:
            return [
                e
                async for e in adapter.generate(
                    GenerationRequest("g", "q", kind="completion", prompt=prompt, sampling=sampling)
                )
            ]
        finally:
            await adapter.aclose()

    events = asyncio.run(run())
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == expected
    assert next(e for e in events if isinstance(e, Usage)).prompt_tokens == len(prompt_ids)
