"""The vLLM double's own quirks (docs/runtimes.md §1 and §6); what every runtime shares is in
test_shared_shapes.py."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.simulators.conftest import TOOLS, chat, client, sse_frames, sse_json


@pytest.fixture(scope="module")
def sim(make_sim):
    return make_sim("vllm", enable_auto_tool_choice=True, tool_call_parser="hermes", max_model_len=64)


@pytest.fixture(scope="module")
def plain(make_sim):
    return make_sim("vllm", enable_prompt_tokens_details=True)


def test_non_stream_body_has_vllm_nulls_and_served_name(sim) -> None:
    body = client(sim).post("/v1/chat/completions", json=chat(max_tokens=3)).json()
    assert body["id"].startswith("chatcmpl-") and len(body["id"]) == len("chatcmpl-") + 16
    assert body["model"] == "sim-model"
    choice = body["choices"][0]
    assert "tool_calls" not in choice["message"]
    assert choice["message"]["reasoning"] is None and choice["stop_reason"] is None
    assert choice["finish_reason"] == "length"
    assert list(body["usage"]) == [
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        "completion_tokens_details",
    ]
    assert body["usage"]["completion_tokens"] == 3
    assert body["system_fingerprint"].startswith("vllm-0.33.0-")
    for key in ("prompt_logprobs", "prompt_token_ids", "kv_transfer_params", "service_tier"):
        assert key in body and body[key] is None


def test_x_request_id_names_the_response(sim) -> None:
    r = client(sim).post("/v1/chat/completions", json=chat(max_tokens=1), headers={"X-Request-Id": "abc123"})
    assert r.json()["id"] == "chatcmpl-abc123"


def test_stream_framing_matches_vllm(sim) -> None:
    raw = client(sim).post("/v1/chat/completions", json=chat(stream=True, stream_options={"include_usage": True})).text
    frames = sse_frames(raw)
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    role = chunks[0]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["prompt_token_ids"] is None and role["prompt_text"] is None
    content = chunks[1]["choices"][0]
    assert content["token_ids"] is None and content["finish_reason"] is None and "kv_transfer_params" in chunks[1]
    final = chunks[-2]["choices"][0]
    assert final["finish_reason"] == "stop" and final["delta"] == {"content": ""} and "stop_reason" in final
    assert "system_fingerprint" not in chunks[-2]  # a usage chunk follows
    usage = chunks[-1]
    assert usage["choices"] == [] and list(usage["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens"]
    assert usage["usage"]["completion_tokens"] == 16
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])
    assert len(text.split()) == 15  # 15 words, then EOS


def test_final_chunk_carries_fingerprint_without_usage(sim) -> None:
    chunks = sse_json(client(sim).post("/v1/chat/completions", json=chat(stream=True, max_tokens=2)).text)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["system_fingerprint"].startswith("vllm-")


def test_errors_are_nested_with_integer_codes(sim) -> None:
    c = client(sim)
    r = c.post("/v1/chat/completions", json={**chat(), "model": "nope"})
    assert r.status_code == 404
    assert r.json()["error"] == {
        "message": "The model `nope` does not exist. Valid aliases: sim-model.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    r = c.post("/v1/chat/completions", json=chat(stream_options={"include_usage": True}))
    assert r.status_code == 400 and "Stream options can only be defined" in r.json()["error"]["message"]
    r = c.post("/v1/chat/completions", json={"model": "sim-model"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "Bad Request"
    r = c.post("/v1/chat/completions", content=b"{}", headers={"content-type": "text/plain"})
    assert r.status_code == 400


def test_context_length_error_and_silent_clamp(sim) -> None:
    c = client(sim)
    r = c.post("/v1/chat/completions", json=chat("w " * 80))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "input_tokens"
    assert err["message"] == (
        "This model's maximum context length is 64 tokens. However, your prompt contains at least 65 input tokens."
    )
    # max_tokens beyond the context is clamped, not rejected
    r = c.post("/v1/chat/completions", json=chat("a b c", max_tokens=1000, ignore_eos=True))
    assert r.status_code == 200
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] == 64


def test_tool_choice_auto_needs_server_flags(plain) -> None:
    r = client(plain).post("/v1/chat/completions", json=chat(tools=TOOLS))
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )
    r = client(plain).post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required"))
    assert r.status_code == 400 and "--tool-call-parser" in r.json()["error"]["message"]


def test_tool_calls_non_stream_and_named_finish(sim) -> None:
    c = client(sim)
    body = c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required")).json()
    choice = body["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert choice["message"]["content"] is None and choice["finish_reason"] == "tool_calls"
    assert call["id"].startswith("chatcmpl-tool-") and len(call["id"]) == len("chatcmpl-tool-") + 16
    assert json.loads(call["function"]["arguments"]) == {"city": "sim"}
    named = {"type": "function", "function": {"name": "get_weather"}}
    body = c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice=named)).json()
    assert body["choices"][0]["finish_reason"] == "stop"  # vLLM follows OpenAI for a named tool
    body = c.post("/v1/chat/completions", json=chat("hi [[sim:tool_call]]", tools=TOOLS)).json()
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_tool_call_stream_deltas(sim) -> None:
    chunks = sse_json(
        client(sim).post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required", stream=True)).text
    )
    first = chunks[1]["choices"][0]["delta"]["tool_calls"][0]
    assert list(first) == ["id", "type", "index", "function"] and first["function"] == {"name": "get_weather"}
    rest = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[2:-1]]
    assert all(list(d) == ["index", "function"] for d in rest)
    assert json.loads("".join(d["function"]["arguments"] for d in rest)) == {"city": "sim"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_in_stream_error_then_done(sim) -> None:
    r = client(sim).post("/v1/chat/completions", json=chat("x [[sim:error_after=2]]", stream=True))
    assert r.status_code == 200
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]"
    assert json.loads(frames[-2]) == {
        "error": {"message": "Simulated engine failure", "type": "InternalServerError", "param": None, "code": 500}
    }


def test_status_fault_answers_in_the_error_shape(sim) -> None:
    r = client(sim).post("/v1/chat/completions", json=chat("x", sim_fault={"status": 503}))
    assert r.status_code == 503 and r.json()["error"]["code"] == 503


def test_stop_string_is_the_stop_reason(sim) -> None:
    c = client(sim)
    text = c.post("/v1/chat/completions", json=chat(max_tokens=6)).json()["choices"][0]["message"]["content"]
    stop = " " + text.split()[3]
    choice = c.post("/v1/chat/completions", json=chat(max_tokens=6, stop=[stop])).json()["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)


def test_engine_finish_reasons_pass_through(sim) -> None:
    body = client(sim).post("/v1/chat/completions", json=chat("x [[sim:finish=repetition]]")).json()
    assert body["choices"][0]["finish_reason"] == "repetition"


def test_completions_have_no_role_chunk(sim) -> None:
    c = client(sim)
    body = c.post("/v1/completions", json={"model": "sim-model", "prompt": "a b", "max_tokens": 2}).json()
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    chunks = sse_json(
        c.post("/v1/completions", json={"model": "sim-model", "prompt": "a b", "max_tokens": 2, "stream": True}).text
    )
    assert all("text" in ch["choices"][0] for ch in chunks)
    assert set(chunks[0]["choices"][0]) >= {
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "prompt_token_ids",
        "token_ids",
    }


def test_cached_tokens_only_with_flag(plain) -> None:
    c = client(plain)
    prompt = " ".join(f"w{i}" for i in range(40))
    c.post("/v1/chat/completions", json=chat(prompt, max_tokens=1))
    usage = c.post("/v1/chat/completions", json=chat(prompt, max_tokens=1)).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 16


def test_health_version_models_metrics(sim) -> None:
    c = client(sim)
    r = c.get("/health")
    assert r.status_code == 200 and r.content == b""
    assert c.get("/version").json() == {"version": "0.33.0"}
    card = c.get("/v1/models").json()["data"][0]
    assert card["owned_by"] == "vllm" and card["max_model_len"] == 64
    c.post("/v1/chat/completions", json=chat(max_tokens=2))
    r = c.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:time_to_first_token_seconds",
    ):
        assert name in families, name
    sample = families["vllm:num_requests_running"].samples[0]
    assert sample.labels == {"model_name": "sim-model", "engine": "0"}
    assert families["vllm:generation_tokens"].samples[0].value >= 2
    success = {s.labels["finished_reason"]: s.value for s in families["vllm:request_success"].samples}
    assert success["length"] >= 1 and set(success) >= {"stop", "length", "abort"}


@pytest.mark.parametrize(
    "bad",
    [
        {"messages": ["x"]},
        {"max_tokens": "abc"},
        {"n": 0},
        {"stop": 5},
        {"stream_options": "x", "stream": True},
        {"temperature": "hot"},
    ],
)
def test_malformed_fields_get_400_bad_request(sim, bad) -> None:
    r = client(sim).post("/v1/chat/completions", json={**chat(), **bad})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "Bad Request" and err["code"] == 400 and err["param"].split(".")[0] in bad


def test_continuous_usage_stats_put_usage_on_every_chunk(sim) -> None:
    chunks = sse_json(
        client(sim)
        .post(
            "/v1/chat/completions",
            json=chat(
                stream=True, max_tokens=3, stream_options={"include_usage": True, "continuous_usage_stats": True}
            ),
        )
        .text
    )
    assert all("usage" in ch for ch in chunks)
    assert [ch["usage"]["completion_tokens"] for ch in chunks[1:-1]] == [1, 2, 3]


def test_the_bad_candidate_faults(sim) -> None:
    """The faults tests/rollout builds bad rollout candidates from (simulators/faults.py)."""
    c = client(sim)
    codes = [
        c.post("/v1/chat/completions", json=chat("[[sim:error_every=4]]", max_tokens=1)).status_code for _ in range(8)
    ]
    assert codes.count(500) == 2 and codes.count(200) == 6
    body = c.post("/v1/chat/completions", json=chat("hi [[sim:bad_tool_args]]", tools=TOOLS, tool_choice="required"))
    arguments = body.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)
    plain = c.post("/v1/chat/completions", json=chat("one two three four", max_tokens=1)).json()["usage"]
    scaled = c.post(
        "/v1/chat/completions", json=chat("one two three four", max_tokens=1, sim_fault={"prompt_tokens_scale": 1.5})
    ).json()["usage"]
    assert scaled["prompt_tokens"] == round(plain["prompt_tokens"] * 1.5) != plain["prompt_tokens"]
