"""End to end: the official `openai` client -> gateway process -> test upstream process."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MSG = [{"role": "user", "content": "say something"}]


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def strict(gateway):
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key="unused", max_retries=0, _strict_response_validation=True
    )


def test_models(strict):
    models = strict.models.list()
    assert [m.id for m in models.data] == ["m"]
    assert strict.models.retrieve("m").id == "m"
    with pytest.raises(openai.NotFoundError):
        strict.models.retrieve("nope")


def test_chat_non_streaming_strict(strict):
    r = strict.chat.completions.create(model="m", messages=MSG, max_tokens=4)
    assert r.object == "chat.completion" and r.model == "m"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "alpha bravo charlie delta"
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 4 and r.usage.total_tokens == r.usage.prompt_tokens + 4


def test_chat_streaming_strict_and_equal_to_non_stream(strict, client):
    whole = client.chat.completions.create(model="m", messages=MSG, max_tokens=5).choices[0].message.content
    parts, reasons = [], []
    for chunk in strict.chat.completions.create(model="m", messages=MSG, max_tokens=5, stream=True):
        assert chunk.usage is None  # usage was not asked for
        for c in chunk.choices:
            parts.append(c.delta.content or "")
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert "".join(parts) == whole
    assert reasons == ["length"]


def test_stream_include_usage_last(client):
    chunks = list(
        client.chat.completions.create(
            model="m", messages=MSG, max_tokens=3, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_chunks_say_usage_null_and_carry_a_system_fingerprint(client, gateway):
    # as OpenAI's: with include_usage every chunk before the usage chunk has the key `usage`
    # (null); every chunk and the whole answer name the same backend configuration
    body = {"model": "m", "messages": MSG, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    raw = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30).text
    frames = [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: {")]
    assert len(frames) >= 3 and frames[-1]["choices"] == []
    assert all("usage" in f and f["usage"] is None for f in frames[:-1])
    fingerprints = {f["system_fingerprint"] for f in frames}
    assert len(fingerprints) == 1 and next(iter(fingerprints)).startswith("fp_")
    whole = client.chat.completions.create(model="m", messages=MSG, max_tokens=3)
    assert whole.system_fingerprint == next(iter(fingerprints))
    legacy = client.completions.create(model="m", prompt="hi", max_tokens=2)
    assert legacy.system_fingerprint == whole.system_fingerprint


def test_a_forced_named_function_finishes_stop_streamed_too(client):
    # OpenAI: a named tool_choice finishes "stop" (streamed or not), "required" "tool_calls"
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice, word in ((named, "stop"), ("required", "tool_calls")):
        stream = client.chat.completions.create(model="m", messages=MSG, tools=TOOLS, tool_choice=choice, stream=True)
        reasons = [c.choices[0].finish_reason for c in stream if c.choices and c.choices[0].finish_reason]
        assert reasons == [word], choice


def test_stream_helper_rebuilds_tool_calls(client):
    with client.chat.completions.stream(model="m", messages=MSG, tools=TOOLS, tool_choice="required") as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"  # not "get_weatherget_weather"
    assert call.function.arguments == '{"city": "Paris"}'
    assert call.id and final.choices[0].finish_reason == "tool_calls"


def test_tool_calls_non_streaming(strict):
    r = strict.chat.completions.create(
        model="m", messages=MSG, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}
    )
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"  # OpenAI's word for a forced named function
    assert msg.tool_calls[0].function.name == "get_weather"
    assert isinstance(msg.tool_calls[0].function.arguments, str)


def test_n_greater_than_one(strict, client):
    r = strict.chat.completions.create(model="m", messages=MSG, n=3, max_tokens=2)
    assert [c.index for c in r.choices] == [0, 1, 2]
    seen = {}
    for chunk in client.chat.completions.create(model="m", messages=MSG, n=3, max_tokens=2, stream=True):
        for c in chunk.choices:
            if c.finish_reason:
                seen[c.index] = seen.get(c.index, 0) + 1
    assert seen == {0: 1, 1: 1, 2: 1}


def test_completions_streaming_and_not(client):
    r = client.completions.create(model="m", prompt="hello", max_tokens=3)
    assert r.object == "text_completion" and r.choices[0].text == "alpha bravo charlie"
    text = "".join(
        c.choices[0].text
        for c in client.completions.create(model="m", prompt="hello", max_tokens=3, stream=True)
        if c.choices
    )
    assert text == r.choices[0].text


def test_completions_batch_prompts_get_dense_indices(client):
    r = client.completions.create(model="m", prompt=["a", "b"], n=2, max_tokens=1)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        ({"temperature": 3}, openai.BadRequestError),
        ({"top_p": 2}, openai.BadRequestError),
        ({"n": 0}, openai.BadRequestError),
        ({"presence_penalty": 3}, openai.BadRequestError),
        ({"logprobs": True, "top_logprobs": 30}, openai.BadRequestError),
        ({"seed": 2**64}, openai.BadRequestError),
        ({"stop": ["a", "b", "c", "d", "e"]}, openai.BadRequestError),
        ({"stream_options": {"include_usage": True}}, openai.BadRequestError),
        ({"tool_choice": "required"}, openai.BadRequestError),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "other"}}}, openai.BadRequestError),
        ({"model": "no-such-model"}, openai.NotFoundError),
    ],
)
def test_error_cases(client, kwargs, exc):
    args = {"model": "m", "messages": MSG, **kwargs}
    with pytest.raises(exc) as info:
        client.chat.completions.create(**args)
    body = info.value.body
    assert set(body) == {"message", "type", "param", "code"}
    assert body["code"] is None or isinstance(body["code"], str)
    if exc is openai.NotFoundError:
        assert body["code"] == "model_not_found"


@pytest.mark.parametrize(
    "raw,ctype",
    [
        (b"{not json", "application/json"),
        (b"[1]", "application/json"),
        (b"", "application/json"),
        (b"\xff\xfe", "text/plain"),
    ],
)
def test_malformed_bodies_are_400(gateway, raw, ctype):
    r = httpx.post(gateway.url + "/v1/chat/completions", content=raw, headers={"content-type": ctype})
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/json")
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_body_too_large_is_413(gateway):
    big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (5 * 1024 * 1024) + b'"}]}'
    r = httpx.post(gateway.url + "/v1/chat/completions", content=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_unknown_route_and_request_id(gateway):
    r = httpx.get(gateway.url + "/v1/nothing")
    assert r.status_code == 404 and "error" in r.json()
    r = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": MSG, "max_tokens": 1},
        headers={"x-request-id": "my-req-42"},
    )
    assert r.headers["x-request-id"] == "my-req-42"
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m", "messages": MSG, "max_tokens": 1})
    assert len(r.headers["x-request-id"]) >= 16


def test_midstream_upstream_error_becomes_error_event_then_done(client, gateway):
    with pytest.raises(openai.APIError, match="simulated engine failure"):
        for _ in client.chat.completions.create(
            model="m", messages=MSG, stream=True, extra_body={"sim": {"fail_after": 2}}
        ):
            pass
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": MSG, "stream": True, "sim": {"cut_after": 2}},
    ) as r:
        raw = r.read()
    events = [b for b in raw.split(b"\n\n") if b]
    assert events[-1] == b"data: [DONE]" and b'"error"' in events[-2]


def test_upstream_status_errors_map(gateway):
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m", "messages": MSG, "sim": {"status": 400}})
    assert r.status_code == 400
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m", "messages": MSG, "sim": {"status": 503}})
    # the one table of upstream statuses (adapters/runtime_errors.py), as for every runtime
    assert r.status_code == 503 and r.json()["error"]["code"] == "backend_unavailable"


def test_health_ready_metrics(gateway, client):
    client.chat.completions.create(model="m", messages=MSG, max_tokens=1)
    assert httpx.get(gateway.url + "/healthz").status_code == 200
    assert httpx.get(gateway.url + "/readyz").json()["status"] == "ready"
    text = httpx.get(gateway.url + "/metrics").text
    for name in (
        "switchyard_requests_total",
        "switchyard_time_to_first_token_seconds",
        "switchyard_inter_token_latency_seconds",
        "switchyard_request_duration_seconds",
        "switchyard_prompt_tokens_total",
        "switchyard_completion_tokens_total",
        "switchyard_inflight_requests",
        "switchyard_gateway_overhead_seconds",
    ):
        assert name in text, name
    assert 'switchyard_requests_total{backend="up",model="m",status="200",track=""}' in text


def test_error_as_first_stream_event_gets_its_own_status(gateway):
    # the upstream fails before any content: the client gets an HTTP error, not a 200 stream
    r = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": MSG, "stream": True, "sim": {"fail_after": 0}},
    )
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"


def overhead_seconds(gateway) -> tuple[float, float]:
    """`switchyard_gateway_overhead_seconds` of model m: (sum, count)."""
    values = {"sum": 0.0, "count": 0.0}  # before the model's first request
    for line in httpx.get(gateway.url + "/metrics").text.splitlines():
        for part in ("sum", "count"):
            if line.startswith(f'switchyard_gateway_overhead_seconds_{part}{{model="m"}} '):
                values[part] = float(line.split()[-1])
    return values["sum"], values["count"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_gateway_overhead_leaves_out_a_slow_upstream(gateway, client, stream):
    delay_s = 0.3
    before_sum, before_count = overhead_seconds(gateway)
    r = client.chat.completions.create(
        model="m", messages=MSG, max_tokens=3, stream=stream, extra_body={"sim": {"ttft_ms": delay_s * 1000}}
    )
    if stream:
        list(r)
    after_sum, after_count = overhead_seconds(gateway)
    assert after_count == before_count + 1
    assert after_sum - before_sum < delay_s / 3, after_sum - before_sum
