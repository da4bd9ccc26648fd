"""adapters/oneshot_wire.py: the one-shot calls' bodies and the checks on their answers
(a wrong count or shape is the backend's failure, never a short answer), without a network."""

from __future__ import annotations

import base64
import logging
import struct
import sys

import pytest

from adapters.errors import GatewayError, invalid_request
from adapters.oneshot import DetokenizeRequest, EmbeddingRequest, TokenizeRequest
from adapters.oneshot_wire import (
    decode_detokenize,
    decode_embeddings,
    decode_tokenize,
    detokenize_body,
    embedding_body,
    embedding_error,
    tokenize_body,
)


def b64(*floats: float) -> str:
    return base64.b64encode(struct.pack(f"<{len(floats)}f", *floats)).decode()


def test_embedding_body():
    req = EmbeddingRequest("r", "m", ["a", "b"])
    assert embedding_body(req, "served") == {"model": "served", "input": ["a", "b"], "encoding_format": "float"}
    assert embedding_body(req, None)["model"] == "m"
    full = EmbeddingRequest("r", "m", [[1, 2]], dimensions=0, user="u")
    assert embedding_body(full, "s") == {
        "model": "s",
        "input": [[1, 2]],
        "encoding_format": "float",
        "dimensions": 0,
        "user": "u",
    }


def test_embeddings_in_input_order_floats_or_base64():
    payload = {
        "data": [{"index": 1, "embedding": b64(0.5, -2.0)}, {"index": 0, "embedding": [1, 2.5]}],
        "usage": {"prompt_tokens": 7},
    }
    result = decode_embeddings(payload, 2, "b")
    assert result.vectors == [[1.0, 2.5], [0.5, -2.0]] and result.prompt_tokens == 7
    assert all(isinstance(x, float) for x in result.vectors[0])
    # no index: the position
    assert decode_embeddings({"data": [{"embedding": [1]}, {"embedding": [2]}]}, 2, "b").vectors == [[1.0], [2.0]]


@pytest.mark.parametrize("usage", [None, {}, {"prompt_tokens": "7"}, {"prompt_tokens": True}, "7"])
def test_embedding_usage_unknown_unless_a_count(usage):
    payload = {"data": [{"index": 0, "embedding": [1]}], "usage": usage}
    assert decode_embeddings(payload, 1, "b").prompt_tokens is None


@pytest.mark.parametrize(
    ("payload", "count", "why"),
    [
        (None, 1, "it answered no embeddings for 1 inputs"),
        ({"data": "x"}, 1, "it answered no embeddings for 1 inputs"),
        ({"data": []}, 1, "it answered 0 embeddings for 1 inputs"),
        ({"data": [{"embedding": [1]}] * 2}, 1, "it answered 2 embeddings for 1 inputs"),
    ],
)
def test_a_wrong_count_is_the_backend_s_failure(payload, count, why):
    with pytest.raises(GatewayError) as info:
        decode_embeddings(payload, count, "b")
    assert (info.value.status, info.value.code) == (502, "upstream_error") and str(info.value).endswith(why)


@pytest.mark.parametrize(
    "data",
    [
        ["junk", {"embedding": [1]}],
        [{"index": "0", "embedding": [1]}, {"index": 1, "embedding": [1]}],
        [{"index": -1, "embedding": [1]}, {"index": 1, "embedding": [1]}],
        [{"index": 2, "embedding": [1]}, {"index": 1, "embedding": [1]}],
        [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}],
        [{"index": 0, "embedding": [True]}, {"index": 1, "embedding": [1]}],
        [{"index": 0, "embedding": ["1"]}, {"index": 1, "embedding": [1]}],
        [{"index": 0, "embedding": {"x": 1}}, {"index": 1, "embedding": [1]}],
        [{"index": 0, "embedding": "not base64!"}, {"index": 1, "embedding": [1]}],
        [{"index": 0, "embedding": base64.b64encode(b"abc").decode()}, {"index": 1, "embedding": [1]}],
    ],
)
def test_a_wrong_shape_is_the_backend_s_failure(data):
    with pytest.raises(GatewayError) as info:
        decode_embeddings({"data": data}, 2, "b")
    assert info.value.status == 502 and str(info.value).endswith("it answered an embedding list of the wrong shape")


def test_an_index_at_the_last_position_is_taken():
    data = [{"index": 1, "embedding": [2]}, {"index": 0, "embedding": [1]}]
    assert decode_embeddings({"data": data}, 2, "b").vectors == [[1.0], [2.0]]


@pytest.mark.parametrize(
    ("status", "code", "param", "message", "named"),
    [
        (400, "context_length_exceeded", "messages", "too long", "input"),
        (400, None, None, "Model does not support Matryoshka representation", "dimensions"),
        (400, None, None, "invalid dimensions", "dimensions"),
        (400, None, "model", "invalid dimensions", "model"),
        (400, None, None, "bad input", None),
        (422, None, None, "dimensions", None),
    ],
)
def test_embedding_refusals_are_named_by_their_field(status, code, param, message, named):
    err = GatewayError(status, message, code=code, param=param)
    assert embedding_error(err) is err and err.param == named


def test_context_length_refusal_from_the_builder_is_about_input():
    err = invalid_request("too long", param="messages", code="context_length_exceeded")
    assert embedding_error(err).param == "input"


def test_tokenize_bodies():
    assert tokenize_body(TokenizeRequest("r", "m", prompt="hi"), "s") == {
        "model": "s",
        "prompt": "hi",
        "add_special_tokens": True,
    }
    asked = tokenize_body(TokenizeRequest("r", "m", prompt="hi", return_token_strs=True), "s")
    assert asked["return_token_strs"] is True
    msgs = [{"role": "user", "content": "hi"}]
    assert tokenize_body(TokenizeRequest("r", "m", messages=msgs), None) == {
        "model": "m",
        "messages": msgs,
        "add_generation_prompt": True,
        "continue_final_message": False,
        "add_special_tokens": False,
    }
    full = TokenizeRequest(
        "r",
        "m",
        messages=msgs,
        add_special_tokens=False,
        add_generation_prompt=False,
        continue_final_message=True,
        tools=[{"type": "function"}],
        chat_template_kwargs={"k": 1},
    )
    body = tokenize_body(full, "s")
    assert body["tools"] == [{"type": "function"}] and body["chat_template_kwargs"] == {"k": 1}
    assert (body["add_generation_prompt"], body["continue_final_message"]) == (False, True)
    assert body["add_special_tokens"] is False and "return_token_strs" not in body
    assert detokenize_body(DetokenizeRequest("r", "m", [1, 2]), None) == {"model": "m", "tokens": [1, 2]}
    assert detokenize_body(DetokenizeRequest("r", "m", [1]), "s")["model"] == "s"


def test_tokenize_answers():
    result = decode_tokenize({"tokens": [1, 2], "max_model_len": 8, "token_strs": ["a", "b"]}, "b", False)
    assert (result.tokens, result.max_model_len, result.token_strs) == ([1, 2], 8, None)
    assert decode_tokenize({"tokens": [1, 2], "max_model_len": 8, "token_strs": ["a", "b"]}, "b", True).token_strs == [
        "a",
        "b",
    ]
    # SGLang's tokenizer length sentinel is capped
    assert decode_tokenize({"tokens": [], "max_model_len": sys.maxsize * 4}, "b", False).max_model_len == sys.maxsize


@pytest.mark.parametrize(
    "payload",
    [
        None,
        {"tokens": [1]},
        {"tokens": "1", "max_model_len": 8},
        {"tokens": [True], "max_model_len": 8},
        {"max_model_len": 8},
    ],
)
def test_a_tokenize_answer_of_the_wrong_shape(payload):
    with pytest.raises(GatewayError) as info:
        decode_tokenize(payload, "b", False)
    assert str(info.value).endswith("its tokenize answer has the wrong shape")


@pytest.mark.parametrize("strs", [None, ["a"], ["a", 2], "ab"])
def test_token_strings_asked_for_must_be_there(strs):
    with pytest.raises(GatewayError) as info:
        decode_tokenize({"tokens": [1, 2], "max_model_len": 8, "token_strs": strs}, "b", True)
    assert str(info.value).endswith("its tokenize answer lacks the token strings")


def test_detokenize_answers():
    assert decode_detokenize({"prompt": "hi"}, "b", "prompt").prompt == "hi"
    assert decode_detokenize({"text": "hi"}, "b", "text").prompt == "hi"
    for payload in ({"text": "hi"}, {"prompt": 1}, None):
        with pytest.raises(GatewayError) as info:
            decode_detokenize(payload, "b", "prompt")
        assert str(info.value).endswith("its detokenize answer has the wrong shape")


def test_base64_with_stray_characters_is_refused_not_skipped():
    with pytest.raises(GatewayError):
        decode_embeddings({"data": [{"index": 0, "embedding": b64(1.0) + "!"}]}, 1, "b")


def test_each_refusal_is_logged_with_the_backend_and_the_answer_s_start(caplog):
    long = "y" * 300
    cases = [
        (lambda: decode_embeddings({"data": []}, 1, "bk"), "backend bk failed: it answered 0 embeddings for 1 inputs"),
        (
            lambda: decode_embeddings({"data": [{"index": 0, "embedding": long}]}, 1, "bk"),
            f"backend bk failed: it answered an embedding list of the wrong shape ({repr({'index': 0, 'embedding': long})[:200]})",
        ),
        (
            lambda: decode_tokenize({"tokens": long}, "bk", False),
            f"backend bk failed: its tokenize answer has the wrong shape ({repr({'tokens': long})[:200]})",
        ),
        (
            lambda: decode_tokenize({"tokens": [1], "max_model_len": 8, "token_strs": long}, "bk", True),
            "backend bk failed: its tokenize answer lacks the token strings "
            f"({repr({'tokens': [1], 'max_model_len': 8, 'token_strs': long})[:200]})",
        ),
        (
            lambda: decode_detokenize({"prompt": long}, "bk", "text"),
            f"backend bk failed: its detokenize answer has the wrong shape ({repr({'prompt': long})[:200]})",
        ),
    ]
    for call, line in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING), pytest.raises(GatewayError):
            call()
        assert [r.getMessage() for r in caplog.records] == [line]
