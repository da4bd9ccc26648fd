"""The llama.cpp adapter against a real `llama-server` (`make test-llamacpp`, marker
`llamacpp`), built from source (scripts/install-llamacpp.sh) and serving make-tiny's
weights as an F32 GGUF; a gateway process sits in front and the official `openai`
client talks to it. Random weights give gibberish; every protocol path is llama.cpp's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx
import openai
import pytest

from adapters.http_adapter import HTTPAdapter
from adapters.llamacpp import LlamaCppDialect
from tests.llamacpp_tier import SLOT_CTX, backend, start_llamacpp, tiny_model
from tests.procs import eventually, start_gateway

pytestmark = pytest.mark.llamacpp


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llamacpp")
    p = start_llamacpp(tiny_model(tmp), tmp)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def gateway(server, tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("gw"), {"models": {"m": {"backends": [backend(server)]}}})
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)


# The city is an enum: under the tool grammar a random-weight model would otherwise
# write one string until max_tokens.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Lyon"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def slots(server) -> list[dict]:
    return httpx.get(server.url + "/slots", timeout=10).json()


def metric(server, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(f"llamacpp:{name} "))


def test_non_stream_with_cached_tokens(client):
    resp = client.chat.completions.create(model="m", messages=ask("hello there"), max_tokens=8, temperature=0)
    assert resp.id.startswith("chatcmpl-") and resp.model == "m"
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.prompt_tokens > 0 and 0 < resp.usage.completion_tokens <= 8
    assert isinstance(resp.usage.prompt_tokens_details.cached_tokens, int)
    assert "timings" not in resp.model_dump()  # llama.cpp's own extra stays behind the gateway


def test_stream_one_finish_and_usage_last(client):
    chunks = list(
        client.chat.completions.create(
            model="m", messages=ask("hello"), max_tokens=8, stream=True, stream_options={"include_usage": True}
        )
    )
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0 and not chunks[-1].choices


def test_n_above_the_slot_count_is_fanned_out(client):
    # llama.cpp refuses n above its slots (400) and runs n only on n free slots at once.
    resp = client.chat.completions.create(model="m", messages=ask("hi"), max_tokens=4, n=3, temperature=0)
    assert sorted(c.index for c in resp.choices) == [0, 1, 2]


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}], ids=["required", "named"]
)
def test_a_forced_tool_choice_makes_one_call(client, choice):
    # llama.cpp alone lets the random model write text first, to max_tokens (tool_required.json);
    # the dialect opens the call (adapters/llamacpp.py, force_tool_call).
    resp = client.chat.completions.create(
        model="m", messages=ask("weather in Paris?"), tools=TOOLS, tool_choice=choice, max_tokens=128, temperature=0
    )
    calls = resp.choices[0].message.tool_calls
    assert calls and len(calls) == 1 and calls[0].id.startswith("call_") and calls[0].type == "function"
    assert calls[0].function.name == "get_weather" and isinstance(json.loads(calls[0].function.arguments), dict)
    # OpenAI ends a named function's forced call with "stop" (the gateway answers so for every runtime).
    assert resp.choices[0].finish_reason == ("stop" if isinstance(choice, dict) else "tool_calls")


def test_json_schema_is_followed(client):
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    resp = client.chat.completions.create(
        model="m",
        messages=ask("yes or no?"),
        max_tokens=64,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}},
    )
    assert json.loads(resp.choices[0].message.content)["answer"] in ("yes", "no")


@pytest.mark.parametrize("top", [None, 2])
def test_logprobs_give_the_alternatives_asked_for(client, top):
    extra = {} if top is None else {"top_logprobs": top}
    resp = client.chat.completions.create(
        model="m", messages=ask("hello"), max_tokens=3, temperature=0, logprobs=True, **extra
    )
    content = resp.choices[0].logprobs.content
    assert content and all(len(t.top_logprobs) == (top or 0) for t in content)  # llama.cpp alone sends 20


def test_context_length_exceeded(client):
    long_prompt = "word " * (SLOT_CTX + 100)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            r = client.chat.completions.create(model="m", messages=ask(long_prompt), max_tokens=4, stream=stream)
            if stream:
                list(r)
        assert info.value.code == "context_length_exceeded"


def test_a_malformed_body_is_a_400_never_llamacpps_500(gateway):
    r = httpx.post(
        gateway.url + "/v1/chat/completions",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_a_cut_stream_frees_the_slot_within_a_second(gateway, server):
    """Through the gateway: the client leaves once llama.cpp generates; llama.cpp's own
    /slots shows the slot free again, and far fewer tokens generated than asked."""
    assert eventually(lambda: not any(s["is_processing"] for s in slots(server)), 30, 0.1)
    predicted_before = metric(server, "tokens_predicted_total")
    max_tokens = SLOT_CTX - 512
    body = {"model": "m", "messages": ask("a long story"), "max_tokens": max_tokens, "stream": True}
    body["ignore_eos"] = True

    async def leave_once_generating() -> float:
        # A plain socket closed by hand: an HTTP client's cancelled stream may stay open.
        gw = httpx.URL(gateway.url)
        payload = json.dumps(body).encode()
        reader, writer = await asyncio.open_connection(gw.host, gw.port)
        writer.write(
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {gw.host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert b"data:" in await reader.readuntil(b"\n\n")
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        return time.monotonic()

    left = asyncio.run(leave_once_generating())
    assert eventually(lambda: not any(s["is_processing"] for s in slots(server)), 30, 0.01)
    freed_after = time.monotonic() - left
    generated = metric(server, "tokens_predicted_total") - predicted_before
    print(f"slot freed {freed_after * 1000:.0f} ms after the client left; {generated:.0f} of {max_tokens} tokens")
    # llama.cpp notices a closed socket within its 1 s poll; the whole answer takes far longer.
    assert generated < max_tokens / 2, generated
    assert metric(server, "requests_processing") == 0


def test_load_health_and_conditions_from_the_real_server(server):
    async def read():
        adapter = HTTPAdapter(LlamaCppDialect, "llamacpp-real", server.url, "tiny")
        try:
            return await adapter.health(), await adapter.load(), adapter.dialect
        finally:
            await adapter.aclose()

    health, load, dialect = asyncio.run(read())
    assert health.ok
    assert (load.running, load.waiting) == (0, 0) and load.kv_usage == 0.0
    assert dialect.props is not None and dialect.props.n_ctx == SLOT_CTX and dialect.props.slots == 2
    assert dialect.props.tools


def test_tokenize_and_detokenize_through_the_gateway(gateway):
    r = httpx.post(gateway.url + "/tokenize", json={"model": "m", "prompt": "Hello world 42"}, timeout=30)
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    assert tokens
    # max_model_len is the slot's context from /props, read with the first load poll.
    assert eventually(
        lambda: (
            httpx.post(gateway.url + "/tokenize", json={"model": "m", "prompt": "x"}, timeout=30).json()[
                "max_model_len"
            ]
            == SLOT_CTX
        ),
        30,
        0.5,
    )
    back = httpx.post(gateway.url + "/detokenize", json={"model": "m", "tokens": tokens}, timeout=30)
    assert back.status_code == 200 and back.json()["prompt"] == "Hello world 42"


def test_requests_beyond_the_slots_wait_in_the_gateway_never_in_llamacpp(server, tmp_path):
    """llama.cpp defers a request beyond its slots without bound, and a deferred stream
    gets no HTTP status at all. With `max_inflight` = slots the extra request waits in the
    gateway's bounded queue, and one beyond that queue is answered 429 at once."""
    config = {"admission": {"max_queue": 1, "max_queue_wait_s": 120}, "models": {"m": {"backends": [backend(server)]}}}
    gw = start_gateway(tmp_path, config)
    body = {"model": "m", "messages": ask("a long story"), "max_tokens": SLOT_CTX - 512, "stream": True}
    body["ignore_eos"] = True

    async def scenario() -> tuple[int, float]:
        async with httpx.AsyncClient(base_url=gw.url, timeout=120) as http:
            holders = [asyncio.create_task(_hold_stream(http, body)) for _ in range(3)]  # 2 slots + 1 queued
            assert await asyncio.to_thread(
                eventually, lambda: sum(s["is_processing"] for s in slots(server)) == 2, 60, 0.05
            )
            await asyncio.sleep(0.5)  # the third is in the gateway's queue by now
            refused = await http.post("/v1/chat/completions", json={**body, "stream": False})
            deferred = metric(server, "requests_deferred")
            for task in holders:
                task.cancel()
            await asyncio.gather(*holders, return_exceptions=True)
            return refused.status_code, deferred

    try:
        status, deferred = asyncio.run(scenario())
    finally:
        gw.stop()
    assert status == 429 and deferred == 0
    assert eventually(lambda: not any(s["is_processing"] for s in slots(server)), 30, 0.05)


async def _hold_stream(http: httpx.AsyncClient, body: dict) -> None:
    async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
        async for _ in resp.aiter_bytes():
            pass
