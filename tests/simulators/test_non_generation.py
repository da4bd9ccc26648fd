"""The doubles' endpoints that generate nothing, in each runtime's own shape (vLLM's
`serve/tokenize` and `pooling/embed`, SGLang's `serving_tokenize.py` and
`serving_embedding.py`, TGI's router `tokenize` and `chat_tokenize`, TRT-LLM's
`/_internal/tokenize`)."""

from __future__ import annotations

import base64
import math
import struct

import pytest

from tests.simulators.conftest import client


@pytest.fixture(scope="module")
def vllm_gen(make_sim):
    return make_sim("vllm", max_model_len=64)


@pytest.fixture(scope="module")
def vllm_pool(make_sim):
    return make_sim("vllm", runner="pooling", max_model_len=16, embedding_dim=24)


@pytest.fixture(scope="module")
def vllm_mrl(make_sim):
    return make_sim("vllm", runner="pooling", is_matryoshka=True, embedding_dim=24)


@pytest.fixture(scope="module")
def sglang(make_sim):
    return make_sim("sglang", health_latency=0, model_dir="/models/e5", is_embedding=True, embedding_dim=24)


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


# ---- vLLM ---------------------------------------------------------------------------


def test_vllm_tokenize_counts_what_usage_reports(vllm_gen) -> None:
    http = client(vllm_gen)
    body = http.post("/tokenize", json={"model": "sim-model", "prompt": "the cat and the dog"}).json()
    assert list(body) == ["count", "max_model_len", "tokens", "token_strs"]
    assert body["count"] == 5 == len(body["tokens"]) and body["max_model_len"] == 64 and body["token_strs"] is None
    assert body["tokens"][0] == body["tokens"][3]  # the same word, the same id
    usage = http.post("/v1/completions", json={"prompt": "the cat and the dog", "max_tokens": 1}).json()["usage"]
    assert usage["prompt_tokens"] == body["count"]
    chat = [{"role": "user", "content": "a b c"}]
    chat_usage = http.post("/v1/chat/completions", json={"messages": chat, "max_tokens": 1}).json()["usage"]
    assert http.post("/tokenize", json={"messages": chat}).json()["count"] == chat_usage["prompt_tokens"] == 5
    no_prompt = http.post("/tokenize", json={"messages": chat, "add_generation_prompt": False}).json()
    assert no_prompt["count"] == 4


def test_vllm_tokenize_strings_detokenize_and_refusals(vllm_gen) -> None:
    http = client(vllm_gen)
    body = http.post("/tokenize", json={"prompt": "zebra crossing", "return_token_strs": True}).json()
    assert body["token_strs"] == ["zebra", "crossing"]
    assert http.post("/detokenize", json={"tokens": body["tokens"]}).json() == {"prompt": "zebra crossing"}
    both = http.post("/tokenize", json={"messages": [{"role": "user", "content": "x"}], "continue_final_message": True})
    assert both.status_code == 400 and "Cannot set both" in both.json()["error"]["message"]
    other = http.post("/tokenize", json={"model": "other", "prompt": "x"})
    assert other.status_code == 404 and other.json()["error"]["type"] == "NotFoundError"
    negative = http.post("/detokenize", json={"tokens": [-1]})
    assert negative.status_code == 400 and negative.json()["error"]["code"] == 400
    assert http.post("/v1/embeddings", json={"input": "x"}).status_code == 404  # a generation model has no route


def test_vllm_pooling_runner_serves_embeddings_only(vllm_pool) -> None:
    http = client(vllm_pool)
    assert http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}).status_code == 404
    body = http.post("/v1/embeddings", json={"model": "sim-model", "input": ["the cat", "the cat", "a dog"]}).json()
    assert body["id"].startswith("embd-") and body["object"] == "list" and body["model"] == "sim-model"
    assert [d["index"] for d in body["data"]] == [0, 1, 2] and all(d["object"] == "embedding" for d in body["data"])
    first, again, other = (d["embedding"] for d in body["data"])
    assert len(first) == 24 and abs(norm(first) - 1) < 1e-9 and first == again and first != other
    assert list(body["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details"]
    assert body["usage"]["prompt_tokens"] == 6 == body["usage"]["total_tokens"]
    ids = http.post("/v1/embeddings", json={"input": [[5, 6], [7]]}).json()
    assert ids["usage"]["prompt_tokens"] == 3


def test_vllm_base64_is_little_endian_float32_of_the_float_answer(vllm_pool) -> None:
    http = client(vllm_pool)
    floats = http.post("/v1/embeddings", json={"input": "the cat"}).json()["data"][0]["embedding"]
    packed = http.post("/v1/embeddings", json={"input": "the cat", "encoding_format": "base64"}).json()
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(floats, abs=1e-6)


def test_vllm_embedding_refusals(vllm_pool, vllm_mrl) -> None:
    http = client(vllm_pool)
    dims = http.post("/v1/embeddings", json={"input": "x", "dimensions": 8})
    assert dims.status_code == 400 and "does not support matryoshka" in dims.json()["error"]["message"]
    assert dims.json()["error"]["param"] is None
    long = http.post("/v1/embeddings", json={"input": " ".join(["w"] * 17)})
    assert long.status_code == 400 and "maximum context length is 16 tokens" in long.json()["error"]["message"]
    assert http.post("/v1/embeddings", json={"model": "nope", "input": "x"}).status_code == 404
    assert http.post("/v1/embeddings", json={"input": "x", "encoding_format": "hex"}).status_code == 400
    cut = client(vllm_mrl).post("/v1/embeddings", json={"input": "the cat", "dimensions": 8}).json()
    assert len(cut["data"][0]["embedding"]) == 8 and abs(norm(cut["data"][0]["embedding"]) - 1) < 1e-9


# ---- SGLang -------------------------------------------------------------------------


def test_sglang_tokenize_and_detokenize_shapes(sglang) -> None:
    http = client(sglang)
    one = http.post("/v1/tokenize", json={"prompt": "the cat sat"}).json()
    assert list(one) == ["tokens", "count", "max_model_len"] and one["count"] == 3
    many = http.post("/tokenize", json={"prompt": ["a b", "c"]}).json()
    assert many["count"] == [2, 1] and [len(t) for t in many["tokens"]] == [2, 1]
    chat = http.post("/v1/tokenize", json={"messages": [{"role": "user", "content": "a b c"}]}).json()
    assert chat["count"] == 5
    both = http.post("/v1/tokenize", json={"prompt": "x", "messages": []})
    assert both.status_code == 400 and both.json()["object"] == "error"
    assert http.post("/v1/detokenize", json={"tokens": one["tokens"]}).json() == {"text": "the cat sat"}
    lists = http.post("/detokenize", json={"tokens": [one["tokens"][:1], one["tokens"][1:]]}).json()
    assert lists == {"text": ["the", "cat sat"]}


def test_sglang_embeddings_shape_and_refusals(sglang, make_sim) -> None:
    http = client(sglang)
    body = http.post("/v1/embeddings", json={"model": "sim-model", "input": ["the cat"], "encoding_format": "base64"})
    payload = body.json()
    assert list(payload) == ["data", "model", "object", "usage"]
    assert payload["model"] == "/models/e5"  # the model path, not the served name
    assert isinstance(payload["data"][0]["embedding"], list)  # encoding_format is ignored
    assert payload["usage"]["prompt_tokens"] == 2 and payload["usage"]["reasoning_tokens"] == 0
    blank = http.post("/v1/embeddings", json={"input": ["ok", "  "]})
    assert blank.status_code == 400 and blank.json()["message"] == "Input at index 1 cannot be empty or whitespace only"
    dims = http.post("/v1/embeddings", json={"input": "x", "dimensions": 4})
    assert dims.status_code == 400 and "does not support matryoshka" in dims.json()["message"]
    generator = make_sim("sglang", health_latency=0)
    refused = client(generator).post("/v1/embeddings", json={"input": "x"})
    assert refused.status_code == 400 and "--is-embedding" in refused.json()["message"]


# ---- TGI and TRT-LLM ----------------------------------------------------------------------


def test_tgi_tokenize_and_chat_tokenize(make_sim) -> None:
    http = client(make_sim("tgi"))
    tokens = http.post("/tokenize", json={"inputs": "the  cat"}).json()
    assert [(t["text"], t["start"], t["stop"]) for t in tokens] == [("the", 0, 3), ("cat", 5, 8)]
    chat = http.post("/chat_tokenize", json={"messages": [{"role": "user", "content": "hi there"}]}).json()
    assert chat["templated_text"].startswith("user: hi there")
    assert [t["text"] for t in chat["tokenize_response"]] == chat["templated_text"].split()
    assert http.post("/v1/embeddings", json={"input": "x"}).status_code == 404


def test_trtllm_internal_tokenize_uses_the_same_tokenizer(make_sim) -> None:
    http = client(make_sim("trtllm"))
    body = http.post("/_internal/tokenize", json={"prompt": "the cat the"}).json()
    assert body["count"] == 3 and body["tokens"][0] == body["tokens"][2] != body["tokens"][1]
    assert http.post("/v1/embeddings", json={"input": "x"}).status_code == 404


# ---- the context boundary, which the two runtimes draw one token apart ---------------------


def test_an_input_of_exactly_the_context_length_is_refused_by_sglang_only(vllm_pool, make_sim) -> None:
    sglang = client(make_sim("sglang", health_latency=0, is_embedding=True, embedding_dim=24, max_model_len=16))
    vllm = client(vllm_pool)  # max_model_len 16 too
    full, over = list(range(1, 17)), list(range(1, 18))
    assert vllm.post("/v1/embeddings", json={"input": full}).status_code == 200
    refused = vllm.post("/v1/embeddings", json={"input": over})
    assert refused.status_code == 400 and "you requested 17 tokens" in refused.json()["error"]["message"]
    assert sglang.post("/v1/embeddings", json={"input": full[:-1]}).status_code == 200
    refused = sglang.post("/v1/embeddings", json={"input": full})
    assert refused.status_code == 400
    assert refused.json()["message"] == "The input (16 tokens) is longer than the model's context length (16 tokens)."
