"""adapters/openai.py's dialect on its own (no server): the capabilities its options declare
and their defaults, a rejected sampling parameter refused or dropped, the stream events and
answers that are not what OpenAI sends, and the one-shot calls' paths and bodies."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest, LoadSnapshot, ParameterSupport, SamplingParams, TextDelta
from adapters.errors import GatewayError
from adapters.oneshot import DetokenizeRequest, EmbeddingRequest, TokenizeRequest
from adapters.openai import OpenAIDialect


def test_the_capabilities_and_their_defaults() -> None:
    d = OpenAIDialect("b", "served")
    caps = d.capabilities
    assert (caps.tools, caps.cached_tokens, caps.embeddings, caps.tokenize) == (True, True, True, False)
    assert (d.backend, d.served_model, d.options) == ("b", "served", {})
    off = OpenAIDialect("b", options={"tools": False, "embeddings": 0}).capabilities
    assert (off.tools, off.embeddings) == (False, False)


class NoTopK(OpenAIDialect):
    runtime = "NoTopK 1.0"
    parameters = ParameterSupport(rejected={"top_k": "no top-k sampling", "seed": "no seed"})


def chat(unsupported: str = "reject", **sampling) -> GenerationRequest:
    return GenerationRequest(
        "r",
        "m",
        messages=[{"role": "user", "content": "hi"}],
        sampling=SamplingParams(**sampling),
        unsupported_params=unsupported,
    )


def test_a_rejected_parameter_is_refused_naming_the_runtime_and_the_way_out() -> None:
    with pytest.raises(GatewayError) as info:
        NoTopK("b").body(chat(top_k=5, seed=1), stream=False)
    err = info.value
    assert (err.status, err.param, err.code) == (400, "top_k", "unsupported_by_backend")
    assert str(err) == (
        "The backend serving this model runs NoTopK 1.0, which does not support top_k, seed "
        "(top_k: no top-k sampling; seed: no seed); the model's `unsupported_params: drop` would drop them."
    )


def test_a_rejected_parameter_is_dropped_when_the_model_says_so() -> None:
    body = NoTopK("b", "served").body(chat("drop", top_k=5, seed=1, temperature=0.5), stream=True)
    assert "top_k" not in body and "seed" not in body
    assert body["temperature"] == 0.5 and body["model"] == "served" and body["stream"] is True


def test_neutral_values_of_a_rejected_parameter_pass() -> None:
    assert NoTopK("b").body(chat(top_k=0), stream=False)["top_k"] == 0  # asks nothing: neither refused nor dropped


def test_a_stream_event_that_is_not_an_object_is_skipped_and_one_that_is_not_json_fails() -> None:
    d = OpenAIDialect("b")
    assert d.decode_data(b"[1, 2]", chat=True) == []
    with pytest.raises(GatewayError) as info:
        d.decode_data(b"{not json", chat=True)
    assert (info.value.status, str(info.value)) == (
        502,
        "The backend serving this model failed: it sent a stream event that is not JSON",
    )
    events = d.decode_data(b'{"choices": [{"index": 0, "delta": {"content": "hi"}}]}', chat=True)
    assert [(type(e), e.text) for e in events] == [(TextDelta, "hi")]


def test_an_error_in_a_stream_is_the_runtimes_error() -> None:
    with pytest.raises(GatewayError) as info:
        OpenAIDialect("b").decode_data(b'{"error": {"message": "boom", "type": "server_error"}}', chat=True)
    assert info.value.status == 502 and "boom" in str(info.value)


@pytest.mark.parametrize(
    ("raw", "words"),
    [(b"<html>", "its answer was not JSON"), (b"[1]", "its answer was not a JSON object")],
)
def test_an_answer_that_is_not_a_json_object_fails(raw, words) -> None:
    with pytest.raises(GatewayError) as info:
        OpenAIDialect("b").decode_answer(raw, chat=True)
    assert (info.value.status, str(info.value)) == (502, f"The backend serving this model failed: {words}")


def test_an_error_answer_is_the_runtimes_error() -> None:
    with pytest.raises(GatewayError) as info:
        OpenAIDialect("b").decode_answer(b'{"error": {"message": "bad model", "type": "invalid_request_error"}}', True)
    # read as the answer's 502 (the runtime's table: unavailable), where a stream's error is its 500
    assert (info.value.status, info.value.code, str(info.value)) == (
        503,
        "backend_unavailable",
        "The OpenAI-compatible backend serving this model is unavailable: bad model",  # the runtime named
    )


class Reclassifies(OpenAIDialect):
    """A runtime whose 500 with this message means the client's mistake (as TGI's 422s do)."""

    def classify(self, status, parsed):
        return 400 if parsed.message == "input too odd" else None


def test_a_dialects_own_classification_is_applied_to_its_errors() -> None:
    err = Reclassifies("b").error(500, {"error": {"message": "input too odd"}})
    assert (err.status, str(err)) == (400, "input too odd")
    assert Reclassifies("b").error(500, {"error": {"message": "other"}}).status == 502


async def test_what_the_generic_dialect_does_not_do() -> None:
    d = OpenAIDialect("b")
    req = chat()
    assert d.event_filter(req) is None and d.abort_calls(req) == []
    assert d.classify(500, None) is None  # type: ignore[arg-type]
    load = await d.load(None)  # type: ignore[arg-type]
    assert isinstance(load, LoadSnapshot) and load.waiting is None and load.running is None
    assert await d.ready(None) is None  # type: ignore[arg-type]


def test_the_one_shot_calls_paths_and_bodies() -> None:
    d = OpenAIDialect("b", "served")
    embed = d.embed_call(EmbeddingRequest("r", "m", inputs=["a", "b"]))
    assert (embed.path, embed.body["model"], embed.body["input"]) == ("/embeddings", "served", ["a", "b"])
    tok = TokenizeRequest("r", "m", prompt="hello")
    assert d.render_call(tok) is None and d.rendered(tok, {"x": 1}) is tok
    call = d.tokenize_call(tok)
    assert (call.path, call.body["model"], call.body["prompt"]) == ("/tokenize", "served", "hello")
    detok = d.detokenize_call(DetokenizeRequest("r", "m", tokens=[1, 2]))
    assert (detok.path, detok.body) == ("/detokenize", {"model": "served", "tokens": [1, 2]})


def test_the_one_shot_answers_are_read_in_vllms_shape() -> None:
    d = OpenAIDialect("b")
    emb = d.read_embeddings(
        {"data": [{"index": 1, "embedding": [1.0]}, {"index": 0, "embedding": [0.5]}], "usage": {"prompt_tokens": 3}},
        EmbeddingRequest("r", "m", inputs=["a", "b"]),
    )
    assert emb.vectors == [[0.5], [1.0]]
    got = d.read_tokenize(
        {"tokens": [5, 6], "max_model_len": 64, "token_strs": ["a", "b"]},
        TokenizeRequest("r", "m", prompt="ab", return_token_strs=True),
    )
    assert (got.tokens, got.max_model_len, got.token_strs) == ([5, 6], 64, ["a", "b"])
    assert d.read_detokenize({"prompt": "ab", "text": "no"}, DetokenizeRequest("r", "m", tokens=[5])).prompt == "ab"


@pytest.mark.parametrize("answer", [True, False])
def test_an_error_body_under_http_200_is_read_by_its_own_code(answer) -> None:
    """A stream's error event and an answer's error body come under HTTP 200: the
    dialect reports them as 500 and 502, for which the body's code wins."""
    raw = b'{"error": {"message": "prompt too odd", "code": 400, "param": "messages"}}'
    d = OpenAIDialect("b")
    with pytest.raises(GatewayError) as info:
        d.decode_answer(raw, chat=True) if answer else d.decode_data(raw, chat=True)
    assert (info.value.status, info.value.param, str(info.value)) == (400, "messages", "prompt too odd")
