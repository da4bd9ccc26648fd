"""TextTokenizer and the chat template renderer against transformers on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.make_tiny import make_tiny
from engine.text.chat_template import ChatTemplateError, render_chat
from engine.text.tokenizer import TextTokenizer

TEXTS = [
    "Hello, world!",
    " leading space",
    "Caf\u00e9 na\u00efve \u4f60\u597d \U0001f600",
    '{"a": [1, 2.5, null]}',
    '<tool_call>\n{"name": "f"}\n</tool_call>',
    "tabs\tand\nnewlines\r\n",
    "",
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather <now> & later",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in"}, {"type": "text", "text": "Paris?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": ""}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    {"role": "assistant", "content": "Sunny or rain."},
    {"role": "user", "content": "Caf\u00e9?"},
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tok") / "tiny")


@pytest.fixture(scope="module")
def tok(model_dir: Path) -> TextTokenizer:
    return TextTokenizer(model_dir)


@pytest.fixture(scope="module")
def hf(model_dir: Path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(model_dir))


@pytest.mark.parametrize("text", TEXTS)
def test_encode_decode_round_trip(tok: TextTokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert tok.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize("text", TEXTS)
def test_token_bytes_concatenate_to_the_text(tok: TextTokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")


@pytest.mark.parametrize("text", TEXTS)
def test_encoding_matches_transformers(tok: TextTokenizer, hf, text: str) -> None:
    assert tok.encode(text) == hf(text, add_special_tokens=False).input_ids


def test_special_tokens(tok: TextTokenizer) -> None:
    im_end = tok.token_to_id("<|im_end|>")
    assert tok.eos_token == "<|im_end|>"
    assert tok.eos_token_ids[0] == im_end
    assert im_end in tok.special_ids
    assert tok.token_to_id("<tool_call>") not in tok.special_ids  # tool tags are text
    ids = tok.encode("hi<|im_end|>")
    assert ids[-1] == im_end
    assert tok.decode(ids) == "hi"
    assert tok.decode(ids, skip_special_tokens=False) == "hi<|im_end|>"


def test_token_text_of_a_partial_character_is_replaced(tok: TextTokenizer) -> None:
    ids = tok.encode("\U0001f600")
    assert len(ids) > 1  # an emoji takes several byte tokens in this vocabulary
    assert "\ufffd" in tok.token_text(ids[0])


@pytest.mark.parametrize("with_tools", [False, True])
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_chat_template_renders_like_transformers(
    tok: TextTokenizer, hf, with_tools: bool, add_generation_prompt: bool
) -> None:
    tools = TOOLS if with_tools else None
    # transformers does not flatten content parts for templates; give it the flattened form.
    flattened = [dict(m, content="Weather in\nParis?") if i == 1 else m for i, m in enumerate(CONVERSATION)]
    expected = hf.apply_chat_template(
        flattened, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    got = tok.apply_chat_template(CONVERSATION, tools=tools, add_generation_prompt=add_generation_prompt)
    assert got == expected
    assert got.endswith("<|im_start|>assistant\n") == add_generation_prompt
    assert ("<tools>" in got) == with_tools


def test_tools_and_tool_calls_are_in_the_prompt(tok: TextTokenizer) -> None:
    text = tok.apply_chat_template(CONVERSATION, tools=TOOLS)
    tools_block = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert json.loads(tools_block) == TOOLS[0]
    assert "Weather <now> & later" in text  # tojson does not HTML-escape
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert '{"name": "get_weather", "arguments": {}}' in text  # empty arguments string
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain" in text
    assert text.startswith("<|im_start|>system\nBe brief.")


def test_default_system_prompt(tok: TextTokenizer) -> None:
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"content": "no role"}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        [{"role": "user", "content": 5}],
        [{"role": "assistant", "content": "x", "tool_calls": "nope"}],
    ],
)
def test_bad_messages_raise_chat_template_error(tok: TextTokenizer, messages: list) -> None:
    with pytest.raises(ChatTemplateError):
        tok.apply_chat_template(messages)


def test_template_exceptions_become_chat_template_errors() -> None:
    template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok"
    assert render_chat(template, [{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ChatTemplateError, match="first must be user"):
        render_chat(template, [{"role": "system", "content": "x"}])
    with pytest.raises(ChatTemplateError):
        render_chat("{% if %}", [{"role": "user", "content": "x"}])


def test_no_chat_template(tmp_path: Path, model_dir: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    tok = TextTokenizer(plain)
    assert tok.chat_template is None
    with pytest.raises(ChatTemplateError):
        tok.apply_chat_template([{"role": "user", "content": "x"}])
