"""The TensorRT-LLM double's own quirks (docs/runtimes.md §3 and §6); what every runtime shares is
in test_shared_shapes.py."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.simulators.conftest import TOOLS, chat, client, sse_frames, sse_json


@pytest.fixture(scope="module")
def sim(make_sim):
    return make_sim("trtllm", tool_parser="qwen3", max_num_tokens=64, return_perf_metrics=True)


def test_undeclared_fields_and_missing_model_are_400_string_errors(sim) -> None:
    c = client(sim)
    r = c.post("/v1/chat/completions", json=chat(parallel_tool_calls=False))
    assert r.status_code == 400
    assert isinstance(r.json()["error"], str) and "Extra inputs are not permitted" in r.json()["error"]
    assert "parallel_tool_calls" in r.json()["error"]
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and "'model'" in r.json()["error"] and "Field required" in r.json()["error"]
    r = c.post("/v1/chat/completions", json=chat(stream_options={"include_usage": True}))
    assert r.status_code == 400 and "stream is true" in r.json()["error"]


def test_non_stream_shape(sim) -> None:
    body = client(sim).post("/v1/chat/completions", json={**chat(max_tokens=2), "model": "anything"}).json()
    assert body["id"].startswith("chatcmpl-") and len(body["id"]) == len("chatcmpl-") + 32
    assert body["model"] == "anything"
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] == "" and message["tool_calls"] == []
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_stream_frames(sim) -> None:
    r = client(sim).post("/v1/chat/completions", json=chat(stream=True, max_tokens=3))
    assert r.text.startswith("data: {")
    first_frame = r.text.split("\n\n")[0]
    assert first_frame.endswith("} ")  # the trailing space after the role chunk's JSON
    chunks = sse_json(r.text)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop()[len("chatcmpl-") :].isdigit()
    for ch in chunks[1:]:
        assert ch["choices"][0]["delta"]["reasoning_content"] == ""
        assert "null" not in json.dumps(ch)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert not any("usage" in ch for ch in chunks)  # no stream_options, no usage
    assert sse_frames(r.text)[-1] == "[DONE]"


def test_empty_stream_options_still_send_usage(sim) -> None:
    chunks = sse_json(
        client(sim).post("/v1/chat/completions", json=chat(stream=True, max_tokens=2, stream_options={})).text
    )
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_chat_failure_cuts_the_connection_but_completions_send_an_error(sim) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        client(sim).post("/v1/chat/completions", json=chat("x [[sim:error_after=2]]", stream=True))
    raw = (
        client(sim)
        .post("/v1/completions", json={"model": "m", "prompt": "x [[sim:error_after=2]]", "stream": True})
        .text
    )
    frames = sse_frames(raw)
    assert frames[-1] == "[DONE]" and json.loads(frames[-2])["error"]["type"] == "server_error"


def test_context_error_wording(sim) -> None:
    # 80 words + the user marker + the generation prompt = 82 prompt tokens
    r = client(sim).post("/v1/chat/completions", json=chat("w " * 80, stream=True))
    assert r.status_code == 400
    assert r.json()["message"] == (
        "The sum of prompt length (82.0), query length (0) should not exceed max_num_tokens (64)"
    )
    assert r.json()["object"] == "error"


def test_tool_calls(sim) -> None:
    c = client(sim)
    named = {"type": "function", "function": {"name": "get_weather"}}
    body = c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice=named)).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == ""
    assert choice["message"]["tool_calls"][0]["id"].startswith("chatcmpl-tool-")
    chunks = sse_json(c.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="required", stream=True)).text)
    calls = [ch["choices"][0]["delta"]["tool_calls"][0] for ch in chunks if "tool_calls" in ch["choices"][0]["delta"]]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert all(call["type"] == "function" for call in calls)
    assert json.loads("".join(call["function"]["arguments"] for call in calls)) == {"city": "sim"}
    r = c.post("/v1/chat/completions", json=chat(tool_choice="required"))
    assert r.status_code == 400 and r.json()["message"] == "When using `tool_choice`, `tools` must be set."


def test_json_metrics_are_drained_by_each_read(sim) -> None:
    c = client(sim)
    c.get("/metrics")
    c.post("/v1/chat/completions", json=chat("slow [[sim:itl_ms=30]]", max_tokens=8))
    first = c.get("/metrics").json()
    assert isinstance(first, list) and first
    assert {"iter", "numActiveRequests", "numQueuedRequests", "kvCacheStats"} <= set(first[-1])
    assert c.get("/metrics").json() == []


def test_prometheus_metrics_and_info_endpoints(sim, make_sim) -> None:
    c = client(sim)
    families = {f.name for f in text_string_to_metric_families(c.get("/prometheus/metrics").text)}
    assert {"trtllm_num_requests_running", "trtllm_kv_cache_utilization"} <= families
    assert c.get("/health").content == b""
    assert c.get("/health_generate").text == "Generation health check OK"
    assert c.get("/v1/models").json()["data"][0]["owned_by"] == "tensorrt_llm"
    without = make_sim("trtllm")
    assert client(without).get("/prometheus/metrics").status_code == 404


def test_disconnect_is_noticed_by_a_one_second_poll(sim) -> None:
    sim.reset()
    sent = time.time()  # before the request: the first poll is a second after it began
    with httpx.Client(base_url=sim.url, timeout=10) as c:
        with c.stream(
            "POST",
            "/v1/chat/completions",
            json=chat("x [[sim:itl_ms=20]]", stream=True, max_tokens=50, ignore_eos=True),
        ) as r:
            for line in r.iter_lines():
                if '"content"' in line:
                    break
    closed = time.monotonic()
    while sim.stats()["aborted"] == 0 and time.monotonic() - closed < 5:
        time.sleep(0.05)
    abort = sim.stats()["aborts"][0]
    assert abort["how"] == "disconnect"
    # By the simulator's own record (its clock, not this test's polling): not before
    # the first poll, a second after the request began (an abort on the spot would be
    # tens of milliseconds after sending), and at the first poll after the disconnect
    # or, on a loaded machine, the one after.
    assert 1.0 <= abort["at"] - sent < 3.0, abort["at"] - sent


@pytest.mark.parametrize("bad", [{"messages": ["x"]}, {"max_tokens": "abc"}, {"n": 0}])
def test_malformed_fields_get_string_error(sim, bad) -> None:
    r = client(sim).post("/v1/chat/completions", json={**chat(), **bad})
    assert r.status_code == 400 and isinstance(r.json()["error"], str)


def test_continuous_usage_starts_at_zero_on_the_role_chunk(sim) -> None:
    chunks = sse_json(
        client(sim)
        .post(
            "/v1/chat/completions",
            json=chat(stream=True, max_tokens=2, stream_options={"continuous_usage_stats": True}),
        )
        .text
    )
    assert chunks[0]["usage"]["completion_tokens"] == 0
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2
