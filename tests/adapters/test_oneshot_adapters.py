"""The adapters' one-shot calls (embeddings, tokenize, detokenize) against
the wire-faithful simulators and the fast OpenAI upstream, as real processes; and the
wire decoders on the answers a runtime could send."""

from __future__ import annotations

import asyncio
import base64
import math
import struct
import time

import httpx
import pytest

from adapters.errors import GatewayError
from adapters.http_adapter import HTTPAdapter
from adapters.oneshot import DetokenizeRequest, EmbeddingRequest, TokenizeRequest
from adapters.oneshot_wire import decode_embeddings, decode_tokenize, embedding_error
from adapters.openai import OpenAIDialect
from adapters.sglang import SGLangDialect
from adapters.tgi import TGIDialect
from adapters.trtllm import TRTLLMDialect
from adapters.vllm import VLLMDialect
from simulators.testing import start_simulator
from tests.procs import start_upstream


@pytest.fixture(scope="module")
def vllm_pool():
    with start_simulator("vllm", model_name="tiny", runner="pooling", embedding_dim=16, max_model_len=32) as sim:
        yield sim


@pytest.fixture(scope="module")
def sglang_embed():
    with start_simulator("sglang", model_name="tiny", is_embedding=True, health_latency=0, embedding_dim=16) as sim:
        yield sim


def last_body(sim, path: str) -> dict:
    return next(r["body"] for r in reversed(sim.stats()["last_requests"]) if r["path"] == path)


def unit(vector: list[float]) -> bool:
    return abs(math.sqrt(sum(x * x for x in vector)) - 1.0) < 1e-6


async def test_capabilities_follow_what_each_runtime_serves():
    url = "http://127.0.0.1:9"
    assert HTTPAdapter(OpenAIDialect, "o", url + "/v1").capabilities.embeddings
    assert not HTTPAdapter(OpenAIDialect, "o", url + "/v1", options={"embeddings": False}).capabilities.embeddings
    assert not HTTPAdapter(OpenAIDialect, "o", url + "/v1").capabilities.tokenize
    for cls in (VLLMDialect, SGLangDialect):
        plain, embedding = HTTPAdapter(cls, "b", url), HTTPAdapter(cls, "b", url, options={"embeddings": True})
        assert plain.capabilities.tokenize and not plain.capabilities.embeddings
        assert embedding.capabilities.embeddings
    for cls in (TGIDialect, TRTLLMDialect):
        closed = HTTPAdapter(cls, "b", url, options={"embeddings": True})  # nothing to turn on
        assert not closed.capabilities.embeddings and not closed.capabilities.tokenize


async def test_vllm_embeddings_tokenize_detokenize(vllm_pool):
    adapter = HTTPAdapter(VLLMDialect, "v", vllm_pool.url, "tiny", options={"embeddings": True})
    try:
        request = EmbeddingRequest("req-1", "m", inputs=["the cat sat", "a dog"], user="u1")
        result = await adapter.embed(request)
        assert result.prompt_tokens == 5 and len(result.vectors) == 2
        assert all(len(v) == 16 and unit(v) for v in result.vectors)
        sent = last_body(vllm_pool, "/v1/embeddings")
        assert sent == {"model": "tiny", "input": ["the cat sat", "a dog"], "encoding_format": "float", "user": "u1"}
        tokens = await adapter.tokenize(TokenizeRequest("req-2", "m", prompt="the cat sat", return_token_strs=True))
        assert len(tokens.tokens) == 3 and tokens.token_strs == ["the", "cat", "sat"] and tokens.max_model_len == 32
        chat = await adapter.tokenize(
            TokenizeRequest("req-3", "m", messages=[{"role": "user", "content": "a b"}], add_generation_prompt=False)
        )
        assert len(chat.tokens) == 3
        assert last_body(vllm_pool, "/tokenize")["add_special_tokens"] is False  # vLLM's default for messages
        text = await adapter.detokenize(DetokenizeRequest("req-4", "m", tokens=tokens.tokens))
        assert text.prompt == "the cat sat"
    finally:
        await adapter.aclose()


async def test_vllm_refusals_name_the_field(vllm_pool):
    adapter = HTTPAdapter(VLLMDialect, "v", vllm_pool.url, "tiny", options={"embeddings": True})
    try:
        with pytest.raises(GatewayError) as dims:
            await adapter.embed(EmbeddingRequest("r", "m", inputs=["x"], dimensions=4))
        assert (dims.value.status, dims.value.param) == (400, "dimensions")
        with pytest.raises(GatewayError) as long:
            await adapter.embed(EmbeddingRequest("r", "m", inputs=[[7] * 33]))
        assert (long.value.status, long.value.param, long.value.code) == (400, "input", "context_length_exceeded")
    finally:
        await adapter.aclose()


async def test_leaving_an_embedding_closes_the_upstream_connection(vllm_pool):
    adapter = HTTPAdapter(VLLMDialect, "v", vllm_pool.url, "tiny", options={"embeddings": True})
    vllm_pool.reset()
    try:
        task = asyncio.create_task(adapter.embed(EmbeddingRequest("gone-1", "m", inputs=["[[sim:ttft_ms=5000]] hi"])))
        deadline = time.monotonic() + 5
        while not vllm_pool.stats()["live_request_ids"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        while not vllm_pool.stats()["aborts"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        (abort,) = vllm_pool.stats()["aborts"]
        assert abort["how"] == "disconnect" and abort["path"] == "/v1/embeddings"
        assert abort["request_id"] == "embd-gone-1"  # named after the gateway's id
    finally:
        await adapter.aclose()


async def test_sglang_embeddings_tokenize_detokenize(sglang_embed):
    adapter = HTTPAdapter(SGLangDialect, "s", sglang_embed.url, "tiny", options={"embeddings": True})
    try:
        result = await adapter.embed(EmbeddingRequest("r", "m", inputs=[[5, 6, 7]]))
        assert result.prompt_tokens == 3 and unit(result.vectors[0])
        tokens = await adapter.tokenize(TokenizeRequest("r", "m", prompt="one two"))
        assert len(tokens.tokens) == 2 and tokens.token_strs is None
        back = await adapter.detokenize(DetokenizeRequest("r", "m", tokens=tokens.tokens))
        assert back.prompt == "one two"
        assert last_body(sglang_embed, "/v1/detokenize")["skip_special_tokens"] is False
        with pytest.raises(GatewayError) as strs:
            await adapter.tokenize(TokenizeRequest("r", "m", prompt="x", return_token_strs=True))
        assert (strs.value.status, strs.value.param) == (400, "return_token_strs")
        with pytest.raises(GatewayError) as gen:
            await adapter.tokenize(
                TokenizeRequest("r", "m", messages=[{"role": "user", "content": "x"}], add_generation_prompt=False)
            )
        assert (gen.value.status, gen.value.param) == (400, "add_generation_prompt")
    finally:
        await adapter.aclose()


async def test_sglang_without_is_embedding_refuses_with_its_message():
    with start_simulator("sglang", model_name="tiny", health_latency=0) as sim:
        adapter = HTTPAdapter(SGLangDialect, "s", sim.url, "tiny", options={"embeddings": True})
        try:
            with pytest.raises(GatewayError) as err:
                await adapter.embed(EmbeddingRequest("r", "m", inputs=["x"]))
            assert err.value.status == 400 and "--is-embedding" in err.value.message
        finally:
            await adapter.aclose()


async def test_generic_adapter_embeds_against_an_openai_upstream(tmp_path):
    upstream = start_upstream(tmp_path, "--model-name", "text-embedding-3-small")
    adapter = HTTPAdapter(OpenAIDialect, "o", upstream.url + "/v1", "text-embedding-3-small")
    try:
        result = await adapter.embed(EmbeddingRequest("r", "m", inputs=["a b c", "d"], dimensions=8))
        assert [len(v) for v in result.vectors] == [8, 8] and result.prompt_tokens == 4
        body = httpx.get(upstream.url + "/_sim/stats").json()["last_body"]
        assert body["dimensions"] == 8 and body["encoding_format"] == "float"
    finally:
        await adapter.aclose()
        upstream.stop()


# ---- the wire decoders ------------------------------------------------------------------


def test_embeddings_are_put_in_input_order_and_base64_is_read():
    packed = base64.b64encode(struct.pack("<2f", 0.5, -0.25)).decode()
    payload = {
        "data": [{"index": 1, "embedding": [1.0, 0.0]}, {"index": 0, "embedding": packed}],
        "usage": {"prompt_tokens": 9},
    }
    result = decode_embeddings(payload, 2, "b")
    assert result.vectors == [[0.5, -0.25], [1.0, 0.0]] and result.prompt_tokens == 9
    assert decode_embeddings({"data": payload["data"]}, 2, "b").prompt_tokens is None


@pytest.mark.parametrize(
    "payload",
    [
        {"data": [{"index": 0, "embedding": [1.0]}]},  # one vector for two inputs
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]},  # an index twice
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": "not base64!"}]},
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 5, "embedding": [2.0]}]},
        {"error": "boom"},
    ],
)
def test_a_wrong_embedding_answer_is_the_backends_failure(payload):
    with pytest.raises(GatewayError) as err:
        decode_embeddings(payload, 2, "be-secret-7")
    assert (err.value.status, err.value.code) == (502, "upstream_error")
    assert "be-secret-7" not in err.value.message  # a tenant never learns the backend


def test_tokenize_answers_are_checked():
    assert decode_tokenize({"tokens": [1, 2], "count": 2, "max_model_len": 10**30}, "b", False).max_model_len > 0
    with pytest.raises(GatewayError):
        decode_tokenize({"tokens": [1, 2], "max_model_len": 8}, "b", True)  # token strings asked, none sent
    with pytest.raises(GatewayError):
        decode_tokenize({"tokens": ["a"], "max_model_len": 8}, "b", False)


def test_runtime_refusals_are_named_for_embeddings():
    dims = embedding_error(GatewayError(400, 'Model "x" does not support matryoshka representation'))
    assert dims.param == "dimensions"
    other = embedding_error(GatewayError(400, "Input cannot be empty"))
    assert other.param is None
    failure = embedding_error(GatewayError(502, "dimensions exploded"))
    assert failure.param is None
