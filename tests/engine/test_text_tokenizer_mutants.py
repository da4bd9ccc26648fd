"""engine/text/tokenizer.py on tokenizers built here by hand (no model, no transformers): what
the model directory's files say (special tokens, chat templates, EOS ids), the ids <-> text
calls, and the bytes each token stands for under each decoder. test_text_tokenizer.py compares
with transformers on the tiny model, seconds a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from engine.text.chat_template import ChatTemplateError
from engine.text.tokenizer import TextTokenizer, _bytes_to_unicode, _decoder_kinds

# byte-level pieces: "Ġ" is the space, "Ã" and "©" the two bytes of "é" (C3 A9)
BYTE_VOCAB = {"a": 0, "b": 1, "Ġ": 2, "Ġa": 3, "Ã": 4, "©": 5, "Ã©": 6, "ab": 7}
BYTE_MERGES = [("Ġ", "a"), ("Ã", "©"), ("a", "b")]


def _byte_level() -> Tokenizer:
    tok = Tokenizer(models.BPE(vocab=BYTE_VOCAB, merges=BYTE_MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("<|end|>", special=True)])
    tok.add_tokens([AddedToken("<tool>", special=False)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 8)])
    return tok


def _dir(path: Path, tok: Tokenizer, config: dict | None = None, **files: object) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    if config is not None:
        (path / "tokenizer_config.json").write_text(json.dumps(config))
    for name, content in files.items():
        target = path / name.replace("_json", ".json").replace("_jinja", ".jinja")
        target.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.fixture
def byte_dir(tmp_path) -> Path:
    config = {"bos_token": "<s>", "eos_token": {"content": "<|end|>", "special": True}, "pad_token": 5}
    return _dir(tmp_path / "m", _byte_level(), config)


# ---- what the directory says ------------------------------------------------------------


def test_a_directory_without_tokenizer_json_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        TextTokenizer(tmp_path)
    assert str(err.value) == f"{tmp_path / 'tokenizer.json'} not found (only tokenizer.json tokenizers are supported)"


def test_special_tokens_as_strings_added_token_dicts_or_neither(byte_dir):
    tok = TextTokenizer(str(byte_dir))
    assert tok.model_dir == byte_dir
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<s>", "<|end|>", None)
    assert tok.config["bos_token"] == "<s>"


def test_no_tokenizer_config_is_no_special_tokens_and_no_template(tmp_path):
    tok = TextTokenizer(_dir(tmp_path, _byte_level()))
    assert (tok.bos_token, tok.eos_token, tok.pad_token, tok.chat_template) == (None, None, None, None)
    assert tok.config == {}


def test_the_pipeline_follows_the_models_config(tmp_path):
    assert TextTokenizer(_dir(tmp_path / "a", _byte_level())).pipeline == "file"
    assert TextTokenizer(_dir(tmp_path / "b", _byte_level(), config_json={"model_type": "qwen2"})).pipeline == "qwen2"


def test_the_vocabulary_counts_added_tokens_and_only_special_ones_are_special(byte_dir):
    tok = TextTokenizer(byte_dir)
    assert tok.vocab_size == len(BYTE_VOCAB) + 3
    assert tok.special_ids == frozenset({8, 9})


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("plain {{ bos_token }}", "plain {{ bos_token }}"),
        ([{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}], "D"),
        ([{"name": "tool_use", "template": "T"}, {"name": "rag", "template": "R"}], "T"),
        (["junk", {"name": "default", "template": "D"}], "D"),
        ([{"name": "x", "template": "X"}, {"name": "default", "template": ""}], "X"),
        ([], None),
    ],
)
def test_the_chat_template_string_or_named_default_or_first(tmp_path, template, expected):
    assert TextTokenizer(_dir(tmp_path, _byte_level(), {"chat_template": template})).chat_template == expected


def test_a_chat_template_file_serves_when_the_config_has_none(tmp_path):
    tok = TextTokenizer(_dir(tmp_path / "a", _byte_level(), {}, chat_template_jinja="{{ 'é' }}"))
    assert tok.chat_template == "{{ 'é' }}"
    tok = TextTokenizer(_dir(tmp_path / "b", _byte_level(), {"chat_template": "C"}, chat_template_jinja="J"))
    assert tok.chat_template == "C"


def test_the_chat_template_gets_the_special_tokens_or_empty_strings(byte_dir, tmp_path):
    template = "[{{ bos_token }}|{{ eos_token }}|{{ pad_token }}]{{ messages[0]['content'] }}{{ add_generation_prompt }}{{ tools | tojson }}{{ x }}"
    config = {"bos_token": "<s>", "eos_token": {"content": "<|end|>"}, "pad_token": "<p>", "chat_template": template}
    tok = TextTokenizer(_dir(tmp_path / "t", _byte_level(), config))
    got = tok.apply_chat_template([{"role": "user", "content": "hi"}], tools=[{"t": 1}], x="!")
    assert got == '[<s>|<|end|>|<p>]hiTrue[{"t": 1}]!'
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=False).endswith(
        "hiFalsenull"
    )
    bare = TextTokenizer(_dir(tmp_path / "u", _byte_level(), {"chat_template": template}))
    assert bare.apply_chat_template([{"role": "user", "content": "hi"}]) == "[||]hiTruenull"


@pytest.mark.parametrize("template", [None, ""])
def test_no_chat_template_is_refused_naming_the_model(tmp_path, template):
    tok = TextTokenizer(_dir(tmp_path, _byte_level(), {"chat_template": template}))
    with pytest.raises(ChatTemplateError) as err:
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert str(err.value) == f"the model in {tmp_path} has no chat template; use completions instead"


# ---- ids <-> text --------------------------------------------------------------------------


def test_encode_maps_special_token_text_and_adds_special_tokens_only_when_asked(byte_dir):
    tok = TextTokenizer(byte_dir)
    assert tok.encode("ab a<|end|>") == [7, 3, 9]
    assert tok.encode("ab", add_special_tokens=True) == [8, 7]


def test_decode_hides_special_tokens_unless_asked(byte_dir):
    tok = TextTokenizer(byte_dir)
    assert tok.decode([7, 9, 3]) == "ab a"
    assert tok.decode([7, 9, 10], skip_special_tokens=False) == "ab<|end|><tool>"


def test_token_and_id_lookups(byte_dir):
    tok = TextTokenizer(byte_dir)
    assert (tok.token_to_id("Ġa"), tok.token_to_id("zz")) == (3, None)
    assert (tok.id_to_token(6), tok.id_to_token(99)) == ("Ã©", None)


@pytest.mark.parametrize(
    ("eos_token", "generation", "expected"),
    [
        ("<|end|>", None, [9]),
        ("<|end|>", {"eos_token_id": 4}, [9, 4]),
        ("<|end|>", {"eos_token_id": [9, 2, 2, "3", None]}, [9, 2]),
        ("missing", {"eos_token_id": [1]}, [1]),
        (None, {"eos_token_id": None}, []),
        (None, {}, []),
    ],
)
def test_eos_ids_from_both_files_once_each_in_order(tmp_path, eos_token, generation, expected):
    files = {} if generation is None else {"generation_config_json": generation}
    tok = TextTokenizer(_dir(tmp_path, _byte_level(), {"eos_token": eos_token}, **files))
    assert tok.eos_token_ids == expected


# ---- the bytes of each token ----------------------------------------------------------------


def test_byte_level_tokens_stand_for_their_bytes(byte_dir):
    tok = TextTokenizer(byte_dir)
    assert [tok.token_bytes(i) for i in range(len(BYTE_VOCAB))] == [
        b"a",
        b"b",
        b" ",
        b" a",
        b"\xc3",
        b"\xa9",
        "é".encode(),
        b"ab",
    ]
    assert [tok.token_bytes(i) for i in (8, 9, 10)] == [b"<s>", b"<|end|>", b"<tool>"]
    assert tok.max_token_bytes == len(b"<|end|>")


def test_token_text_replaces_a_partial_character(byte_dir):
    tok = TextTokenizer(byte_dir)
    assert (tok.token_text(4), tok.token_text(6), tok.token_text(2)) == ("\ufffd", "é", " ")


@pytest.mark.parametrize("token_id", [-1, len(BYTE_VOCAB) + 3, 1000])
def test_an_id_outside_the_vocabulary_stands_for_nothing(byte_dir, token_id):
    tok = TextTokenizer(byte_dir)
    assert tok.token_bytes(token_id) == b"" and tok.token_text(token_id) == ""


def test_a_byte_level_piece_outside_the_byte_map_is_its_utf8(tmp_path):
    tok = Tokenizer(models.BPE(vocab={"a": 0, "\u4e2d": 1}, merges=[]))
    tok.decoder = decoders.ByteLevel()
    assert TextTokenizer(_dir(tmp_path, tok)).token_bytes(1) == "\u4e2d".encode()


LLAMA_VOCAB = {"<unk>": 0, "<0x41>": 1, "<0x0a>": 2, "\u2581a": 3, "a": 4, "<0x4G>": 5, "x<0x41>": 6, "<0xC3>": 7}


def _llama(decoder) -> Tokenizer:
    tok = Tokenizer(models.BPE(vocab=LLAMA_VOCAB, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoder
    return tok


def test_byte_fallback_tokens_are_their_byte_and_metaspace_a_space(tmp_path):
    # decoded alone, "<0xC3>" would be U+FFFD and Strip would eat "▁a"'s space: the table reads the piece
    decoder = decoders.Sequence(
        [
            decoders.Sequence([decoders.Replace("\u2581", " ")]),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(content=" ", left=1),
        ]
    )
    tok = TextTokenizer(_dir(tmp_path, _llama(decoder)))
    assert [tok.token_bytes(i) for i in range(len(LLAMA_VOCAB))] == [
        b"<unk>",
        b"A",
        b"\n",
        b" a",
        b"a",
        b"<0x4G>",
        b"x<0x41>",
        b"\xc3",
    ]


def test_a_byte_level_decoder_inside_a_sequence_is_found(tmp_path):
    tok = _byte_level()
    tok.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(content=" ", left=1)])
    text = TextTokenizer(_dir(tmp_path, tok))
    assert [text.token_bytes(i) for i in (2, 4)] == [b" ", b"\xc3"]


@pytest.mark.parametrize(
    ("decoder", "kinds"),
    [
        (None, set()),
        ({}, set()),
        ({"type": "Sequence"}, set()),
        (
            {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Sequence", "decoders": [{"type": "Strip"}]}]},
            {"Fuse", "Strip"},
        ),
        ({"decoders": []}, {""}),
    ],
)
def test_the_decoder_kinds_of_a_spec(decoder, kinds):
    assert _decoder_kinds(decoder) == kinds


@pytest.mark.parametrize(
    "decoder", [decoders.Metaspace(), decoders.Replace("\u2581", " ")], ids=["metaspace", "replace"]
)
def test_without_byte_fallback_a_byte_token_is_its_text(tmp_path, decoder):
    tok = TextTokenizer(_dir(tmp_path, _llama(decoder)))
    assert [tok.token_bytes(i) for i in (1, 3)] == [b"<0x41>", b" a"]


def test_byte_fallback_alone_leaves_the_metaspace_to_the_decoder(tmp_path):
    tok = TextTokenizer(_dir(tmp_path, _llama(decoders.ByteFallback())))
    assert [tok.token_bytes(i) for i in (1, 3)] == [b"A", "\u2581a".encode()]


@pytest.mark.parametrize("decoder", [None, decoders.Strip(content="#", left=2)], ids=["none", "strip"])
def test_another_decoder_gives_each_tokens_decoded_text(tmp_path, decoder):
    tok = Tokenizer(models.BPE(vocab={"a": 0, "##b": 1, "\u2581c": 2}, merges=[]))
    if decoder is not None:
        tok.decoder = decoder
    text = TextTokenizer(_dir(tmp_path, tok))
    assert [text.token_bytes(i) for i in range(3)] == [
        t.encode() for t in (["a", "##b", "\u2581c"] if decoder is None else ["a", "b", "\u2581c"])
    ]


def test_a_hole_in_the_vocabulary_stands_for_nothing(tmp_path):
    tok = Tokenizer(models.WordLevel(vocab={"a": 0, "bcd": 2}, unk_token="a"))
    text = TextTokenizer(_dir(tmp_path, tok))
    assert [text.token_bytes(i) for i in range(text.vocab_size)][:2] == [b"a", b""]


def test_the_byte_map_is_gpt2s():
    table = _bytes_to_unicode()
    assert len(table) == 256 and len(set(table.values())) == 256
    assert (table[ord("!")], table[ord("~")], table[0xA1], table[0xAC], table[0xAE], table[0xFF]) == (
        "!",
        "~",
        "\u00a1",
        "\u00ac",
        "\u00ae",
        "\u00ff",
    )
    assert (table[0], table[ord(" ")], table[ord("\n")], table[0x7F], table[0xA0], table[0xAD]) == (
        "\u0100",
        "\u0120",
        "\u010a",
        "\u0121",
        "\u0142",
        "\u0143",
    )
