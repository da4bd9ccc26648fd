"""The SGLang double's own quirks (docs/runtimes.md §2 and §6); what every runtime shares is in
test_shared_shapes.py."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.simulators.conftest import TOOLS, chat, client, sse_frames, sse_json


@pytest.fixture(scope="module")
def sim(make_sim):
    return make_sim(
        "sglang",
        tool_call_parser="qwen25",
        enable_metrics=True,
        enable_cache_report=True,
        max_model_len=64,
        health_latency=0.2,
    )


@pytest.fixture(scope="module")
def bare(make_sim):
    return make_sim("sglang", health_latency=0.2)


def test_ids_are_bare_hex_and_model_is_echoed(sim) -> None:
    c = client(sim)
    body = c.post("/v1/chat/completions", json={**chat(max_tokens=2), "model": "whatever"}).json()
    assert len(body["id"]) == 32 and int(body["id"], 16) >= 0
    assert body["model"] == "whatever"
    no_model = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}).json()
    assert no_model["model"] == "default"
    assert c.post("/v1/chat/completions", json={**chat(max_tokens=1), "rid": "my-rid"}).json()["id"] == "my-rid"
    usage = body["usage"]
    assert usage["reasoning_tokens"] == 0 and usage["completion_tokens_details"] is None
    assert body["choices"][0]["message"]["reasoning_content"] is None
    assert "matched_stop" in body["choices"][0]


def test_matched_stop_is_the_eos_id(sim) -> None:
    body = client(sim).post("/v1/chat/completions", json=chat()).json()
    assert body["choices"][0]["finish_reason"] == "stop" and body["choices"][0]["matched_stop"] == 2


def test_stream_has_separate_finish_chunk(sim) -> None:
    raw = (
        client(sim)
        .post("/v1/chat/completions", json=chat(stream=True, max_tokens=3, stream_options={"include_usage": True}))
        .text
    )
    assert sse_frames(raw)[-1] == "[DONE]"
    chunks = sse_json(raw)
    assert chunks[0]["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    content = chunks[1]["choices"][0]
    assert list(content["delta"]) == ["reasoning_content", "content"]
    assert content["matched_stop"] is None and "usage" not in chunks[1]
    last_content = chunks[-3]["choices"][0]
    assert last_content["finish_reason"] is None and last_content["delta"]["content"]
    finish = chunks[-2]["choices"][0]
    assert finish["delta"] == {"reasoning_content": None} and finish["finish_reason"] == "length"
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["reasoning_tokens"] == 0
    # --enable-cache-report: earlier requests shared this prompt's leading tokens (a radix
    # cache matches token by token), never its last one.
    details, prompt = usage["usage"]["prompt_tokens_details"], usage["usage"]["prompt_tokens"]
    assert list(details) == ["cached_tokens"] and 0 < details["cached_tokens"] < prompt


def test_tool_call_shapes_with_parser(sim) -> None:
    c = client(sim)
    named = {"type": "function", "function": {"name": "get_weather"}}
    body = c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice=named)).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"  # also for a named choice
    assert choice["message"]["content"] == "" and choice["matched_stop"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["id"].startswith("call_") and len(call["id"]) == 5 + 24 and call["index"] == 0
    chunks = sse_json(c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required", stream=True)).text)
    first = chunks[1]
    assert first["usage"] is None
    assert first["choices"][0]["delta"]["role"] is None and first["choices"][0]["delta"]["content"] is None
    assert first["choices"][0]["delta"]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
    deltas = [ch["choices"][0]["delta"]["tool_calls"][0] for ch in chunks[2:-1]]
    assert all(d["id"] is None and d["function"]["name"] is None and d["type"] == "function" for d in deltas)
    assert json.loads("".join(d["function"]["arguments"] for d in deltas)) == {"city": "sim"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"][0]["matched_stop"] == 2  # the stream reports the EOS that ended it


def test_finish_chunks_follow_all_content_for_n_choices(sim) -> None:
    chunks = sse_json(client(sim).post("/v1/chat/completions", json=chat(stream=True, n=2, max_tokens=3)).text)
    finishes = [i for i, ch in enumerate(chunks) if ch["choices"][0]["finish_reason"]]
    contents = [i for i, ch in enumerate(chunks) if ch["choices"][0]["delta"].get("content")]
    assert len(finishes) == 2 and min(finishes) > max(contents)
    assert {chunks[i]["choices"][0]["index"] for i in finishes} == {0, 1}


def test_without_parser_tool_output_is_raw_text(bare) -> None:
    body = client(bare).post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required")).json()
    message = body["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"].startswith("<tool_call>")
    assert body["choices"][0]["finish_reason"] == "stop"


def test_flat_errors_and_context_messages(sim) -> None:
    c = client(sim)
    r = c.post("/v1/chat/completions", json=chat("w " * 80))
    assert r.status_code == 400
    err = r.json()
    assert err["object"] == "error" and err["code"] == 400
    assert "is longer than the model's context length (64 tokens)" in err["message"]
    r = c.post("/v1/chat/completions", json=chat("a b", max_tokens=63, stream=True))
    assert r.status_code == 400  # raised before the first chunk: JSON, not SSE
    assert r.json()["message"].startswith("Requested token count exceeds the model's maximum context length of 64")
    r = c.post("/v1/chat/completions", json=chat("a b", max_tokens=100))  # checked before the prompt's length
    assert (
        r.json()["message"]
        == "max_completion_tokens is too large: 100.This model supports at most 64 completion tokens."
    )
    r = c.post("/v1/chat/completions", json=chat(tool_choice="required"))
    assert r.status_code == 400 and r.json()["message"] == "Tools cannot be empty if tool choice is set to required."
    r = c.post("/v1/chat/completions", json={"model": "m"})
    assert r.status_code == 400 and r.json()["type"] == "Bad Request"


def test_in_stream_error_and_queue_full(sim) -> None:
    c = client(sim)
    frames = sse_frames(c.post("/v1/chat/completions", json=chat("x [[sim:error_after=2]]", stream=True)).text)
    assert frames[-1] == "[DONE]"
    assert json.loads(frames[-2])["error"]["object"] == "error"
    r = c.post("/v1/chat/completions", json=chat("x [[sim:overloaded]]"))
    assert r.status_code == 503 and r.json()["type"] == "503" and r.json()["message"] == "The request queue is full."
    r = c.post("/v1/chat/completions", json=chat("x [[sim:overloaded]]", stream=True))
    assert r.status_code == 200
    assert json.loads(sse_frames(r.text)[0])["error"]["type"] == "SERVICE_UNAVAILABLE"


def test_abort_request_ends_stream_with_abort(sim) -> None:
    c = client(sim)
    sim.reset()
    result: dict[str, object] = {}

    def consume() -> None:
        with httpx.Client(base_url=sim.url, timeout=10) as inner:
            result["raw"] = inner.post(
                "/v1/chat/completions",
                json=chat("slow [[sim:itl_ms=20]]", rid="rid-1", stream=True, max_tokens=50, ignore_eos=True),
            ).text

    t = threading.Thread(target=consume)
    t.start()
    deadline = time.monotonic() + 5
    while "rid-1" not in sim.stats()["live_request_ids"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert c.post("/abort_request", json={"rid": "rid-1"}).status_code == 200
    t.join(5)
    chunks = sse_json(str(result["raw"]))
    assert chunks[-1]["choices"][0]["finish_reason"] == "abort"
    assert sse_frames(str(result["raw"]))[-1] == "[DONE]"
    stats = sim.stats()
    assert [(a["request_id"], a["how"]) for a in stats["aborts"]] == [("rid-1", "abort_request")]


def test_health_is_slow_and_loads_report(sim) -> None:
    c = client(sim)
    started = time.monotonic()
    r = c.get("/health")
    assert r.status_code == 200 and r.content == b"" and time.monotonic() - started >= 0.2
    loads = c.get("/v1/loads").json()
    assert set(loads) >= {"timestamp", "version", "loads"}
    assert set(loads["loads"][0]) >= {
        "dp_rank",
        "num_running_reqs",
        "num_waiting_reqs",
        "token_usage",
        "cache_hit_rate",
        "memory",
        "queues",
    }
    assert "memory" not in c.get("/v1/loads", params={"include": "core"}).json()["loads"][0]
    assert c.get("/v1/loads", params={"include": "bogus"}).status_code == 400
    prom = {f.name for f in text_string_to_metric_families(c.get("/v1/loads", params={"format": "prometheus"}).text)}
    assert {"sglang_num_running_reqs", "sglang_memory_token_capacity", "sglang_queues_waiting"} <= prom
    families = {f.name for f in text_string_to_metric_families(c.get("/metrics").text)}
    assert {
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
    } <= families
    assert c.get("/model_info").json()["served_model_name"] == "sim-model"


def test_metrics_need_the_flag(bare) -> None:
    assert client(bare).get("/metrics").status_code == 404


def test_native_generate_streams_cumulative_text(sim) -> None:
    c = client(sim)
    body = c.post("/generate", json={"text": "a b c", "sampling_params": {"max_new_tokens": 3}}).json()
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    raw = c.post("/generate", json={"text": "a b c", "sampling_params": {"max_new_tokens": 3}, "stream": True}).text
    assert sse_frames(raw)[-1] == "[DONE]"
    texts = [e["text"] for e in sse_json(raw)]
    assert all(texts[i + 1].startswith(texts[i]) for i in range(len(texts) - 1))
    assert texts[-1] == body["text"]


@pytest.mark.parametrize("bad", [{"messages": ["x"]}, {"max_tokens": "abc"}, {"n": 0}])
def test_malformed_fields_get_flat_400(sim, bad) -> None:
    r = client(sim).post("/v1/chat/completions", json={**chat(), **bad})
    assert r.status_code == 400
    body = r.json()
    assert body["object"] == "error" and body["type"] == "Bad Request" and "validation error" in body["message"]
