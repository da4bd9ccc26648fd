"""The TGI double's own quirks (docs/runtimes.md §4 and §6), in both version modes (3.3 and
the pre-3.2 shapes); what every runtime shares is in test_shared_shapes.py."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.simulators.conftest import TOOLS, chat, client, sse_frames, sse_json


@pytest.fixture(scope="module")
def sim(make_sim):
    return make_sim("tgi", max_model_len=64)


@pytest.fixture(scope="module")
def legacy(make_sim):
    return make_sim("tgi", tgi_version="3.1")


def test_chat_body_shape(sim) -> None:
    r = client(sim).post("/v1/chat/completions", json=chat(max_tokens=2, n=3))
    assert r.text.startswith('{"object":"chat.completion","id":""')
    body = r.json()
    assert body["system_fingerprint"] == "3.3.6-dev0-native" and len(body["choices"]) == 1  # n is ignored
    assert list(body["usage"]) == ["prompt_tokens", "completion_tokens", "total_tokens"]
    tgi = client(sim).post("/v1/chat/completions", json={**chat(max_tokens=1), "model": "tgi"}).json()
    assert tgi["model"] == "sim-model"


def test_chat_stream_has_role_on_every_chunk_and_no_role_only_chunk(sim) -> None:
    raw = client(sim).post("/v1/chat/completions", json=chat(stream=True, stream_options={"include_usage": True})).text
    assert sse_frames(raw)[-1] == "[DONE]"
    chunks = sse_json(raw)
    tokens = chunks[:-1]
    assert all(c["choices"][0]["delta"]["role"] == "assistant" and c["usage"] is None for c in tokens)
    assert tokens[0]["choices"][0]["delta"]["content"] != ""  # the first chunk already carries a token
    assert tokens[-1]["choices"][0]["delta"]["content"] == "" and tokens[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 16
    assert all(c["id"] == "" and list(c)[0] == "object" for c in chunks)


def test_completions_finish_empty_then_eos_token_and_have_no_logprobs(sim) -> None:
    c = client(sim)
    chunks = sse_json(c.post("/v1/completions", json={"prompt": "hello there", "stream": True}).text)
    assert [ch["choices"][0]["finish_reason"] for ch in chunks[:-1]] == [""] * (len(chunks) - 1)
    assert chunks[-1]["choices"][0]["finish_reason"] == "eos_token" and "usage" in chunks[-1]
    plain = c.post("/v1/completions", json={"prompt": "hello there"}).json()
    assert plain["choices"][0]["finish_reason"] == "stop"
    asked = c.post("/v1/completions", json={"prompt": "hello there", "max_tokens": 3, "logprobs": 2}).json()
    assert asked["choices"][0]["logprobs"] is None


def test_validation_errors(sim) -> None:
    c = client(sim)
    r = c.post("/v1/chat/completions", json=chat(stop="x"))
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/plain")
    assert "invalid type: string" in r.text
    r = c.post("/v1/chat/completions", json=chat(top_p=1.0))
    assert r.status_code == 422
    assert r.json() == {"error": "Input validation error: `top_p` must be > 0.0 and < 1.0", "error_type": "validation"}
    r = c.post("/v1/chat/completions", json=chat(stop=["a", "b", "c", "d", "e"]))
    assert r.status_code == 422 and "up to 4 stop sequences" in r.json()["error"]
    r = c.post("/v1/chat/completions", json=chat("a b", max_tokens=100))
    assert r.status_code == 422
    assert r.json()["error"].startswith("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 64")
    r = c.post("/v1/chat/completions", json=chat("w " * 80))
    assert "`inputs` must have less than 63 tokens. Given: 82" in r.json()["error"]


def test_stream_errors_arrive_as_sse_with_422(sim) -> None:
    r = client(sim).post("/v1/chat/completions", json=chat("a b", max_tokens=100, stream=True))
    assert r.status_code == 200
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]" and json.loads(frames[0])["error"]["http_status_code"] == 422
    frames = sse_frames(
        client(sim).post("/v1/chat/completions", json=chat("x [[sim:error_after=2]]", stream=True)).text
    )
    assert json.loads(frames[-2])["error"]["http_status_code"] == 422 and frames[-1] == "[DONE]"


def test_overload_and_generation_errors(sim) -> None:
    c = client(sim)
    r = c.post("/v1/chat/completions", json=chat("x [[sim:overloaded]]"))
    assert r.status_code == 429 and r.json() == {"error": "Model is overloaded", "error_type": "overloaded"}
    r = c.post("/v1/chat/completions", json=chat("x [[sim:error_after=1]]"))
    assert r.status_code == 424 and r.json()["error_type"] == "generation"


def test_tool_calls_3_3(sim) -> None:
    c = client(sim)
    body = c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required")).json()
    message = body["choices"][0]["message"]
    assert "content" not in message and body["choices"][0]["finish_reason"] == "stop"
    call = message["tool_calls"][0]
    assert call["id"] == "0" and call["function"]["description"] is None
    assert json.loads(call["function"]["arguments"]) == {"city": "sim"}
    raw = c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required", stream=True)).text
    chunks = sse_json(raw)
    calls = [ch["choices"][0]["delta"]["tool_calls"] for ch in chunks]
    assert all(isinstance(cl, list) and cl[0]["id"] == "0" and cl[0]["type"] == "function" for cl in calls)
    assert calls[0][0]["function"] == {"name": "get_weather", "arguments": "{"}
    assert all(cl[0]["function"]["name"] is None for cl in calls[1:])
    assert json.loads("".join(cl[0]["function"]["arguments"] for cl in calls)) == {"city": "sim"}
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks)  # no finish chunk after a call
    r = c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="nope"))
    assert r.status_code == 422 and r.json()["error_type"] == "tool_error"


def test_tool_calls_before_3_2(legacy) -> None:
    c = client(legacy)
    body = c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required")).json()
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == {"city": "sim"}
    chunks = sse_json(
        c.post(
            "/v1/chat/completions",
            json=chat(tools=TOOLS, tool_choice="required", stream=True, stream_options={"include_usage": True}),
        ).text
    )
    deltas = [ch["choices"][0]["delta"]["tool_calls"] for ch in chunks if "tool_calls" in ch["choices"][0]["delta"]]
    assert all(isinstance(d, dict) and d["id"] == "" for d in deltas)
    # Every token is a tool-call piece, the EOS token's text included (TGI v3.1.1's recordings,
    # integration-tests/models/__snapshots__/test_tools_llama/test_flash_llama_grammar_tools_stream.json).
    joined = "".join(d["function"]["arguments"] for d in deltas)
    assert joined.endswith("</s>") and json.loads(joined.removesuffix("</s>")) == {
        "function": {"_name": "get_weather", "city": "sim"}
    }
    last = chunks[-1]["choices"][0]
    assert last["delta"]["tool_calls"]["function"]["arguments"] == "</s>" and last["finish_reason"] == "stop"
    assert chunks[-1]["usage"] is not None


def test_native_generate_stream_has_no_done(sim) -> None:
    c = client(sim)
    raw = c.post("/generate_stream", json={"inputs": "a b", "parameters": {"max_new_tokens": 3, "details": True}}).text
    frames = sse_frames(raw)
    assert "[DONE]" not in frames
    events = [json.loads(f) for f in frames]
    assert [e["index"] for e in events] == [1, 2, 3] and events[0]["generated_text"] is None
    assert events[-1]["details"]["finish_reason"] == "length"
    assert events[-1]["generated_text"] == "".join(e["token"]["text"] for e in events)
    body = c.post("/generate", json={"inputs": "a b", "parameters": {"max_new_tokens": 3}}).json()
    assert body["generated_text"] == events[-1]["generated_text"]
    r = c.post("/generate_stream", json={"inputs": "x [[sim:overloaded]]"})
    assert r.status_code == 200 and json.loads(sse_frames(r.text)[0])["error_type"] == "overloaded"


def test_info_models_health_metrics(sim) -> None:
    c = client(sim)
    assert c.get("/health").status_code == 200 and c.get("/health").content == b""
    assert set(c.get("/info").json()) == {
        "model_id",
        "model_sha",
        "model_pipeline_tag",
        "max_concurrent_requests",
        "max_best_of",
        "max_stop_sequences",
        "max_input_tokens",
        "max_total_tokens",
        "validation_workers",
        "max_client_batch_size",
        "router",
        "version",
        "sha",
        "docker_label",
    }
    card = c.get("/v1/models").json()["data"][0]
    assert card["created"] == 0 and card["owned_by"] == "sim-model"
    c.post("/v1/chat/completions", json=chat(max_tokens=1))
    text = c.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {"tgi_queue_size", "tgi_batch_current_size", "tgi_request_count", "tgi_request_duration"} <= set(families)
    assert "tgi_request_success " in text  # counters without the _total suffix


@pytest.mark.parametrize("bad", [{"messages": ["x"]}, {"max_tokens": "abc"}, {"temperature": "hot"}])
def test_malformed_fields_get_plain_text_422(sim, bad) -> None:
    r = client(sim).post("/v1/chat/completions", json={**chat(), **bad})
    assert r.status_code == 422 and r.text.startswith("Failed to deserialize the JSON body")


def test_zero_max_tokens_is_a_validation_error(sim) -> None:
    r = client(sim).post("/v1/chat/completions", json=chat(max_tokens=0))
    assert r.status_code == 422 and r.json()["error_type"] == "validation"
