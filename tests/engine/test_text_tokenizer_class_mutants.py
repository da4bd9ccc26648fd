"""engine/text/tokenizer_class.py without transformers: which pipeline each checkpoint gets
(the module's table, row by row) and the exact pipeline each class rebuilds, read from the
rebuilt tokenizer's own spec. test_text_tokenizer_classes.py compares the result with
transformers' tokenizers, seconds a case."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from engine.text.tokenizer_class import QWEN2_PRETOKENIZE_REGEX, load_tokenizer, transformers_pipeline

VOCAB = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "\u2581": 4, "##b": 5, "a##b": 6}
MERGES = [["a", "##b"]]  # valid with and without a continuing-subword prefix


def _file(byte_level: bool = True, **bpe) -> str:
    """A tokenizer.json whose BPE options are the opposite of what a class sets, so each one
    the class forgot to set would show."""
    tok = Tokenizer(models.BPE(vocab=VOCAB, merges=[tuple(m) for m in MERGES], **bpe))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False) if byte_level else pre_tokenizers.Whitespace()
    return tok.to_str()


CONTRARY = dict(dropout=0.5, unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>")


def _options(spec: dict) -> dict:
    return {k: v for k, v in spec["model"].items() if k not in ("vocab", "merges")}


# ---- which pipeline --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_type", "declared", "byte_level", "pipeline"),
    [
        ("qwen2", None, True, "qwen2"),
        ("qwen2", "LlamaTokenizerFast", False, "qwen2"),
        ("qwen2", "PreTrainedTokenizerFast", True, "qwen2"),
        ("mistral", "LlamaTokenizer", False, "file"),
        ("mistral", "Qwen2Tokenizer", True, "file"),
        ("gemma", "Qwen2TokenizerFast", True, "file"),
        ("llama", "LlamaTokenizer", False, "llama"),
        ("llama", "LlamaTokenizerFast", False, "llama"),
        (None, "LlamaTokenizer", False, "llama"),
        ("llama", "LlamaTokenizer", True, "file"),
        ("llama", "Qwen2Tokenizer", True, "qwen2"),
        (None, "Qwen2TokenizerFast", False, "qwen2"),
        ("llama", "PreTrainedTokenizerFast", False, "file"),
        ("llama", None, False, "file"),
        (None, None, True, "file"),
        ("llama", "FastLlamaTokenizer", False, "file"),
    ],
)
def test_the_pipeline_each_checkpoint_gets(model_type, declared, byte_level, pipeline):
    assert transformers_pipeline(model_type, declared, _file(byte_level)) == pipeline


def test_the_byte_level_test_is_a_search_of_the_files_text():
    assert transformers_pipeline("llama", "LlamaTokenizer", '{"note": "a ByteLevel file"}') == "llama"
    assert transformers_pipeline("llama", "LlamaTokenizer", '{"note": ["ByteLevel"]}') == "file"


@pytest.mark.parametrize(
    ("tokenizer_config", "model_config", "pipeline"),
    [
        ({"tokenizer_class": "Qwen2Tokenizer"}, {}, "qwen2"),
        ({}, {"tokenizer_class": "Qwen2Tokenizer"}, "qwen2"),
        ({"tokenizer_class": None}, {"tokenizer_class": "Qwen2Tokenizer"}, "qwen2"),
        ({"tokenizer_class": "PreTrainedTokenizerFast"}, {"tokenizer_class": "Qwen2Tokenizer"}, "file"),
        ({}, {"model_type": "qwen2"}, "qwen2"),
        ({}, {}, "file"),
    ],
)
def test_the_declared_class_is_the_tokenizer_configs_else_the_models(tokenizer_config, model_config, pipeline):
    assert load_tokenizer(_file(), tokenizer_config, model_config).pipeline == pipeline


# ---- what each pipeline builds -------------------------------------------------------------------


def test_the_file_pipeline_is_the_file_as_it_is():
    text = _file(**CONTRARY)
    loaded = load_tokenizer(text, {}, {"model_type": "llama"})
    assert loaded.pipeline == "file"
    assert loaded.spec == json.loads(text)
    assert loaded.tokenizer.to_str() == Tokenizer.from_str(text).to_str()


def test_qwen2_rebuilds_the_bpe_options_and_keeps_vocabulary_and_merges():
    loaded = load_tokenizer(
        _file(fuse_unk=True, byte_fallback=True, ignore_merges=True, **CONTRARY), {}, {"model_type": "qwen2"}
    )
    assert _options(loaded.spec) == {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": "",
        "end_of_word_suffix": "",
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
    }
    assert loaded.spec["model"]["vocab"] == VOCAB
    assert loaded.spec["model"]["merges"] == MERGES


@pytest.mark.parametrize(
    ("config", "prefix"), [({}, False), ({"add_prefix_space": None}, False), ({"add_prefix_space": True}, True)]
)
def test_qwen2_pipeline(config, prefix):
    spec = load_tokenizer(_file(), config, {"model_type": "qwen2"}).spec
    assert spec["normalizer"] == {"type": "NFC"}
    assert spec["pre_tokenizer"] == {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PRETOKENIZE_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": False},
        ],
    }
    assert spec["decoder"]["type"] == "ByteLevel"


def test_the_qwen2_regex_is_transformers():
    assert QWEN2_PRETOKENIZE_REGEX == (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    )


def test_qwen2_splits_digits_one_by_one():
    tok = load_tokenizer(_file(), {}, {"model_type": "qwen2"}).tokenizer
    pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str("ab 123")]
    assert pieces == ["ab", "Ġ", "1", "2", "3"]


def test_llama_rebuilds_the_bpe_options_and_keeps_vocabulary_and_merges():
    text = _file(False, fuse_unk=False, byte_fallback=False, ignore_merges=True, **CONTRARY)
    loaded = load_tokenizer(text, {}, {"model_type": "llama", "tokenizer_class": "LlamaTokenizer"})
    assert loaded.pipeline == "llama"
    assert _options(loaded.spec) == {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": True,
        "byte_fallback": True,
        "ignore_merges": False,
    }
    assert loaded.spec["model"]["vocab"] == VOCAB


LLAMA_DECODER = [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"},
    {"type": "Fuse"},
]
STRIP_ONE = {"type": "Strip", "content": " ", "start": 1, "stop": 0}


@pytest.mark.parametrize(
    ("config", "prepend", "strip"),
    [
        ({}, "first", True),
        ({"add_prefix_space": None}, "first", True),
        ({"legacy": False}, "first", True),
        ({"legacy": True}, "always", True),
        ({"add_prefix_space": True, "legacy": True}, "always", True),
        ({"add_prefix_space": False}, "never", False),
        ({"add_prefix_space": False, "legacy": True}, "never", False),
        ({"add_prefix_space": 0}, "never", False),
    ],
)
def test_llama_pipeline(config, prepend, strip):
    spec = load_tokenizer(_file(False), {"tokenizer_class": "LlamaTokenizer", **config}, {}).spec
    assert spec["normalizer"] is None
    assert spec["pre_tokenizer"] == {
        "type": "Metaspace",
        "replacement": "\u2581",
        "prepend_scheme": prepend,
        "split": False,
    }
    assert spec["decoder"] == {"type": "Sequence", "decoders": LLAMA_DECODER + ([STRIP_ONE] if strip else [])}


def test_llama_decodes_its_pieces_back_to_the_text():
    tok = load_tokenizer(_file(False), {"tokenizer_class": "LlamaTokenizer"}, {}).tokenizer
    assert tok.decode([4, 1, 4, 3]) == "a ab"
