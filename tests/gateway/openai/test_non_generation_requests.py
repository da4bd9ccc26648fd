"""The validation of /v1/embeddings, /tokenize and /detokenize bodies: each mistake a 400
naming its field; OpenAI's limits on `input`; what routing and admission read."""

from __future__ import annotations

import base64
import struct

import pytest

from adapters.errors import GatewayError
from adapters.oneshot import EmbeddingResult
from gateway.openai.embeddings import MAX_INPUTS, MAX_TOTAL_TOKENS, embeddings_payload, parse_embeddings
from gateway.openai.tokenize import parse_detokenize, parse_tokenize


def refused(parse, body: dict) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        parse(body, "rid")
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ("hello world", ["hello world"]),
        (["a", "b c"], ["a", "b c"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
    ],
)
def test_the_four_input_forms(value, items):
    parsed = parse_embeddings({"model": "m", "input": value}, "rid")
    call, as_base64 = parsed.payload
    assert call.inputs == items and call.request_id == "rid" and not as_base64
    assert parsed.requests[0].model == "m" and parsed.requests[0].sampling.max_tokens == 0
    tokens = sum(len(i) if isinstance(i, list) else len(i) // 4 + 1 for i in items)
    assert parsed.prompt_estimate == tokens


@pytest.mark.parametrize(
    "value",
    [
        "",
        [],
        ["ok", ""],
        ["ok", 3],
        [[1], []],
        [[1], "x"],
        [1, -2],
        [True],
        {"text": "x"},
        None,
        ["x"] * (MAX_INPUTS + 1),
        "word " * (4 * MAX_TOTAL_TOKENS),
        [[7] * 1000] * 301,
    ],
)
def test_bad_inputs_are_400s_naming_input(value):
    assert refused(parse_embeddings, {"model": "m", "input": value}).param == "input"


def test_at_most_2048_inputs_are_accepted():
    call, _ = parse_embeddings({"model": "m", "input": ["x"] * MAX_INPUTS}, "rid").payload
    assert len(call.inputs) == MAX_INPUTS


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": "x", "encoding_format": "hex"}, "encoding_format"),
        ({"model": "m", "input": "x", "dimensions": 0}, "dimensions"),
        ({"model": "m", "input": "x", "dimensions": "8"}, "dimensions"),
        ({"model": "m", "input": "x", "user": 5}, "user"),
    ],
)
def test_other_fields_are_checked(body, param):
    assert refused(parse_embeddings, body).param == param


def test_base64_and_dimensions_are_read():
    parsed = parse_embeddings({"model": "m", "input": "x", "encoding_format": "base64", "dimensions": 64}, "rid")
    call, as_base64 = parsed.payload
    assert as_base64 and call.dimensions == 64


def test_the_answer_is_openais_shape_with_the_runtimes_count():
    result = EmbeddingResult([[0.5, -0.25], [1.0, 0.0]], prompt_tokens=7)
    payload, usage = embeddings_payload("my-model", result, as_base64=False, estimate=99)
    assert payload == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
        ],
        "model": "my-model",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    assert (usage.prompt_tokens, usage.completion_tokens) == (7, 0)
    packed, _ = embeddings_payload("my-model", result, as_base64=True, estimate=99)
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert struct.unpack("<2f", raw) == (0.5, -0.25)
    _, estimated = embeddings_payload("m", EmbeddingResult([[1.0]], prompt_tokens=None), as_base64=False, estimate=3)
    assert estimated.prompt_tokens == 3


def test_tokenize_forms_and_defaults():
    prompt = parse_tokenize({"model": "m", "prompt": "hi there", "return_token_strs": True}, "rid")
    assert prompt.payload.prompt == "hi there" and prompt.payload.return_token_strs and prompt.payload.special_tokens
    assert prompt.prompt_estimate == 0  # tokenizing is not charged tokens
    chat = parse_tokenize({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "rid")
    assert chat.payload.add_generation_prompt and not chat.payload.continue_final_message
    assert not chat.payload.special_tokens  # the chat template adds its own
    assert chat.requests[0].messages == [{"role": "user", "content": "hi"}]
    cont = parse_tokenize(
        {
            "model": "m",
            "messages": [{"role": "assistant", "content": "It"}],
            "add_generation_prompt": False,
            "continue_final_message": True,
            "chat_template_kwargs": {"enable_thinking": False},
        },
        "rid",
    )
    assert cont.payload.continue_final_message and cont.payload.chat_template_kwargs == {"enable_thinking": False}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x"}, "model"),
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": 5}, "prompt"),
        ({"model": "m", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "prompt"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "continue_final_message": True},
            "continue_final_message",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": {"a": 1}}, "tools"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []},
            "chat_template_kwargs",
        ),
        ({"model": "m", "prompt": "x", "chat_template": "{{ x }}"}, "chat_template"),
        ({"model": "m", "prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
    ],
)
def test_tokenize_mistakes_name_the_field(body, param):
    assert refused(parse_tokenize, body).param == param


def test_detokenize():
    parsed = parse_detokenize({"model": "m", "tokens": [1, 2, 3]}, "rid")
    assert parsed.payload.tokens == [1, 2, 3] and parsed.prompt_estimate == 0
    for tokens in (None, [1, -1], ["1"], [True], [2**63]):
        assert refused(parse_detokenize, {"model": "m", "tokens": tokens}).param == "tokens"
