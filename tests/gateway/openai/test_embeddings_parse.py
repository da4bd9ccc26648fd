"""gateway/openai/embeddings.py's reader: each refusal's message, the text estimate's
boundary at MAX_TOTAL_TOKENS (four characters a token plus one, per string, rounded
down), the encoding format, and what the call and the stand-in carry."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from adapters.errors import GatewayError
from adapters.oneshot import EmbeddingRequest, EmbeddingResult
from gateway.openai.embeddings import _FORMS, MAX_INPUTS, MAX_TOTAL_TOKENS, embeddings_route, parse_embeddings
from policies.auth import Principal


def refused(body: dict[str, Any]) -> GatewayError:
    with pytest.raises(GatewayError) as exc:
        parse_embeddings({"model": "m", **body}, "rid")
    assert exc.value.status == 400
    return exc.value


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({}, f"'input' is required: {_FORMS}.", "input"),
        (
            {"input": "x", "encoding_format": "int8"},
            "'encoding_format' must be 'float' or 'base64'; got 'int8'.",
            "encoding_format",
        ),
        ({"input": "x", "user": 7}, "'user' must be a string.", "user"),
        ({"input": ""}, "'input' must not be an empty string.", "input"),
        ({"input": []}, f"'input' must be {_FORMS}, and not empty.", "input"),
        ({"input": {}}, f"'input' must be {_FORMS}, and not empty.", "input"),
        (
            {"input": ["a"] * (MAX_INPUTS + 1)},
            f"'input' may hold at most {MAX_INPUTS} items; got {MAX_INPUTS + 1}.",
            "input",
        ),
        ({"input": ["a", ""]}, "'input[1]' must not be an empty string.", "input"),
        ({"input": ["a", [1]]}, f"'input' must be {_FORMS}; arrays may not mix them or hold empty items.", "input"),
    ],
)
def test_each_refusal_says_what_and_where(body, message, param) -> None:
    e = refused(body)
    assert (e.message, e.param) == (message, param)


@pytest.mark.parametrize(
    ("chars", "estimate"),
    [((MAX_TOTAL_TOKENS - 1) * 4, MAX_TOTAL_TOKENS), ((MAX_TOTAL_TOKENS - 1) * 4 + 3, MAX_TOTAL_TOKENS)],
)
def test_text_up_to_the_token_limit_by_its_estimate_is_taken(chars, estimate) -> None:
    intent = parse_embeddings({"model": "m", "input": "a" * chars}, "rid")
    assert intent.payload[0].inputs == ["a" * chars]


def test_text_one_estimated_token_over_the_limit_is_refused_saying_so() -> None:
    e = refused({"input": "a" * (MAX_TOTAL_TOKENS * 4)})
    assert e.message == (
        f"'input' holds about {MAX_TOTAL_TOKENS + 1} tokens; at most {MAX_TOTAL_TOKENS} are accepted in one request."
    )


def test_strings_are_estimated_each_rounded_down_plus_one() -> None:
    # two strings of (MAX/2 - 1) * 4 + 3 characters: (MAX/2 - 1) + 1 each, MAX in all
    half = (MAX_TOTAL_TOKENS // 2 - 1) * 4 + 3
    assert len(parse_embeddings({"model": "m", "input": ["a" * half] * 2}, "rid").payload[0].inputs) == 2
    refused({"input": ["a" * (half + 1)] * 2})


@pytest.mark.parametrize(("fmt", "as_base64"), [(None, False), ("float", False), ("base64", True)])
def test_the_encoding_format_says_whether_base64_was_asked(fmt, as_base64) -> None:
    body = {"model": "m", "input": "x"} | ({} if fmt is None else {"encoding_format": fmt})
    assert parse_embeddings(body, "rid").payload[1] is as_base64


def test_the_call_and_the_stand_in_carry_the_request() -> None:
    intent = parse_embeddings({"model": "m3", "input": ["first", "second"], "user": "u-1"}, "rid-5")
    call, _ = intent.payload
    assert (call.request_id, call.model, call.inputs, call.user) == ("rid-5", "m3", ["first", "second"], "u-1")
    [stand_in] = intent.requests
    assert (stand_in.request_id, stand_in.model, stand_in.prompt) == ("rid-5", "m3", "first")
    tokens = parse_embeddings({"model": "m3", "input": [[5, 6], [7]]}, "rid-6")
    assert tokens.requests[0].prompt == [5, 6] and tokens.payload[0].inputs == [[5, 6], [7]]


# ---- the route's answer (serve, with the call it makes captured) -------------------------


class Adapter:
    name = "secret-box-1"

    def __init__(self, result: EmbeddingResult) -> None:
        self.result = result
        self.asked: list[EmbeddingRequest] = []

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        self.asked.append(request)
        return self.result


def served(body: dict[str, Any], result: EmbeddingResult) -> tuple[Any, Any, Adapter]:
    """The route's invoke and answer for `body`, as it hands them to the OneShotCall."""
    intent = parse_embeddings({"model": "m4", **body}, "rid")
    intent.requests[0].tenant = "t1"
    made: list[tuple] = []
    route = embeddings_route(lambda admitted, invoke, answer: made.append((admitted, invoke, answer)))  # type: ignore[arg-type,return-value]
    admitted = SimpleNamespace(intent=intent, requests=intent.requests)
    assert route.serve(admitted) is None  # type: ignore[arg-type]  # what the call made (here, nothing)
    [(given, invoke, answer)] = made
    assert given is admitted
    return invoke, answer, Adapter(result)


async def test_the_answer_names_the_model_and_charges_the_runtime_s_count_else_the_bound() -> None:
    invoke, answer, adapter = served({"input": ["a", "b"]}, EmbeddingResult([[1.0], [2.0]], prompt_tokens=3))
    result = await invoke(adapter)
    payload, usage = answer(result)
    assert (
        payload["model"] == "m4"
        and payload["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
        and usage.prompt_tokens == 3
    )
    assert [d["embedding"] for d in payload["data"]] == [[1.0], [2.0]]
    assert adapter.asked[0].tenant == "t1"
    body = {"input": "hello world"}
    bound = parse_embeddings({"model": "m4", **body}, "rid").prompt_estimate
    invoke, answer, adapter = served(body, EmbeddingResult([[1.0]], prompt_tokens=None))
    payload, usage = answer(await invoke(adapter))
    assert bound > 1 and payload["usage"]["prompt_tokens"] == bound == usage.prompt_tokens


async def test_base64_is_answered_when_asked() -> None:
    invoke, answer, adapter = served({"input": "x", "encoding_format": "base64"}, EmbeddingResult([[1.0]], 1))
    payload, _ = answer(await invoke(adapter))
    assert payload["data"][0]["embedding"] == "AACAPw=="  # 1.0 as little-endian float32


async def test_the_wrong_number_of_embeddings_is_the_backend_s_failure(caplog) -> None:
    invoke, _, adapter = served({"input": ["a", "b"]}, EmbeddingResult([[1.0]], 1))
    with pytest.raises(GatewayError) as exc:
        await invoke(adapter)
    e = exc.value
    assert (e.status, e.code) == (502, "upstream_error") and e.fails_over  # another backend is tried
    assert e.message.endswith("failed: it answered the wrong number of embeddings") and "secret-box-1" not in e.message
    assert "backend secret-box-1 failed: it answered the wrong number of embeddings" in caplog.text


async def test_the_route_is_named_needs_embeddings_and_reads_with_this_parser() -> None:
    route = embeddings_route(lambda *args: None)  # type: ignore[arg-type,return-value]
    assert route.operation == "embeddings" and route.capability == ("embeddings", "embeddings (/v1/embeddings)")
    intent = await route.parse({"model": "m5", "input": "x"}, "rid-9", Principal("a", None, ["*"], 1))
    assert intent.payload[0].model == "m5" and intent.requests[0].request_id == "rid-9"
