"""The vLLM adapter against a real vLLM CPU server (`make test-vllm`, marker `vllm`).

The server runs from its own environment (.venv-vllm, scripts/install-vllm.sh) on a
tiny random-weight model built by `switchyard engine make-tiny`, as
docs/vllm-cpu.md describes; a gateway process sits in front and the official
`openai` client talks to it. Random weights give gibberish, but every protocol
path checked here is vLLM's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys

import httpx
import openai
import pytest

from adapters.http_adapter import HTTPAdapter
from adapters.kv_events import vllm_block_hashes
from adapters.kv_events_zmq import KVEventSubscriber
from adapters.vllm import VLLMDialect
from policies.kv_index import KVBlockIndex
from processes import HERMES_TOOLS, VLLM_CPU_ENV, VLLM_PYTHON, vllm_server_argv
from tests.adapters.wire_samples import WEATHER_TOOLS as TOOLS
from tests.procs import ROOT, Process, eventually, free_port, start_gateway

pytestmark = pytest.mark.vllm

# Long enough that a generation the cancellation fails to stop takes about 30 s:
# under load vLLM's engine process runs seconds ahead of its API server, which is
# where the abort arrives, and on these machines a process may be woken seconds
# late while the engine works (docs/vllm-cpu.md): at 16,384 one such lag lasted
# nearly the whole answer. The tiny model says 4096 positions; RoPE has no limit,
# so the server overrides it.
MAX_MODEL_LEN = 32768
# The recommended flags (docs/adapters.md): the abort endpoint, and JSON without
# free whitespace, which vLLM 0.32 can only be asked for per server.
RECOMMENDED_FLAGS = [
    "--enable-scale-out",
    "--structured-outputs-config",
    json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
]


@pytest.fixture(scope="module")
def kv_ports():
    """Where the server publishes its KV-cache events, and its replay socket."""
    return free_port(), free_port()


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory, kv_ports):
    if not VLLM_PYTHON.exists():
        pytest.fail("no .venv-vllm: run `make test-vllm` (it runs scripts/install-vllm.sh first)")
    tmp = tmp_path_factory.mktemp("vllm")
    model = tmp / "tiny"
    subprocess.run(
        [sys.executable, "-m", "gateway.cli", "engine", "make-tiny", str(model)], cwd=ROOT, check=True, timeout=300
    )
    port = free_port()
    p = Process(
        [
            *vllm_server_argv(model, port, MAX_MODEL_LEN, extra=HERMES_TOOLS),
            *("--hf-overrides", json.dumps({"max_position_embeddings": MAX_MODEL_LEN})),
            "--enable-prompt-tokens-details",
            *RECOMMENDED_FLAGS,
            # Its KV-cache events, as precise routing reads them. vLLM binds only a wildcard
            # endpoint (`*`); given an address it connects, and a subscriber hears nothing.
            *("--kv-events-config", json.dumps(kv_events_config(*kv_ports))),
        ],
        f"http://127.0.0.1:{port}",
        tmp / "vllm.log",
        env=VLLM_CPU_ENV,
    )
    try:
        p.wait_ready("/health", timeout=float(os.environ.get("VLLM_START_TIMEOUT", "600")))
    except Exception:
        p.stop()
        raise
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(vllm_server, tmp_path_factory):
    config = {
        "models": {
            "m": {
                "backends": [
                    {
                        "name": "vllm-real",
                        "adapter": "vllm",
                        "url": vllm_server.url,
                        "served_model": "tiny",
                        "options": {"prompt_tokens_details": True, "explicit_abort": True},
                    }
                ]
            }
        }
    }
    gateway = start_gateway(tmp_path_factory.mktemp("gw"), config)
    yield openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    gateway.stop()


def kv_events_config(pub_port: int, replay_port: int) -> dict:
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{pub_port}",
        "replay_endpoint": f"tcp://*:{replay_port}",
        "topic": "kv",
    }


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_non_stream_with_cached_tokens(client):
    resp = client.chat.completions.create(model="m", messages=ask("hello there"), max_tokens=8, temperature=0)
    assert resp.id.startswith("chatcmpl-") and resp.model == "m"
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.prompt_tokens > 0 and 0 < resp.usage.completion_tokens <= 8
    assert isinstance(resp.usage.prompt_tokens_details.cached_tokens, int)


def test_stream_one_finish_and_usage_last(client):
    chunks = list(
        client.chat.completions.create(
            model="m", messages=ask("hello"), max_tokens=8, stream=True, stream_options={"include_usage": True}
        )
    )
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0 and not chunks[-1].choices


def test_named_tool_choice(client):
    # vLLM constrains the arguments with structured output for a named tool. On
    # this random-weight model vLLM 0.32 was seen to answer `[2]`: JSON, but not
    # the schema's object, so only "a JSON string" is the adapter's promise here.
    resp = client.chat.completions.create(
        model="m",
        messages=ask("weather in Paris?"),
        tools=TOOLS,
        max_tokens=64,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    calls = resp.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather" and calls[0].id and calls[0].type == "function"
    assert isinstance(calls[0].function.arguments, str)
    json.loads(calls[0].function.arguments)
    # a forced named function finishes `stop`, as OpenAI (and vLLM) answer it
    assert resp.choices[0].finish_reason == "stop"


def test_context_length_exceeded(client):
    long_prompt = "word " * MAX_MODEL_LEN  # two tokens a word
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            r = client.chat.completions.create(model="m", messages=ask(long_prompt), max_tokens=4, stream=stream)
            if stream:
                list(r)
        assert info.value.code == "context_length_exceeded"


def test_legacy_guided_choice_still_constrains(client):
    resp = client.chat.completions.create(
        model="m", messages=ask("yes or no?"), max_tokens=8, extra_body={"guided_choice": ["yes", "no"]}
    )
    assert resp.choices[0].message.content in ("yes", "no")


def test_json_schema_without_free_whitespace(client):
    # Without --structured-outputs-config disable_any_whitespace this model wrote
    # `{"answer": "yes"` and then whitespace up to max_tokens.
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    resp = client.chat.completions.create(
        model="m",
        messages=ask("Tell me a short story about a quick brown fox."),
        max_tokens=200,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema, "strict": True}},
    )
    assert resp.choices[0].message.content in ('{"answer":"yes"}', '{"answer":"no"}')
    assert resp.choices[0].finish_reason == "stop"


def _metric(url: str, name: str, label: str = "") -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name) and label in line)


def _running(url: str) -> float:
    return _metric(url, "vllm:num_requests_running")


def _generated(url: str) -> float:
    return _metric(url, "vllm:generation_tokens_total")


def _ran_to_length(url: str) -> float:
    return _metric(url, "vllm:request_success_total", 'finished_reason="length"')


def _abort_calls(url: str) -> float:
    return _metric(url, "http_requests_total", 'handler="/inference/v1/abort_requests",method="POST",status="2xx"')


def test_cancellation_frees_the_engine(client, vllm_server):
    url = vllm_server.url
    assert eventually(lambda: _running(url) == 0, 20, 0.1)
    generated_before, lengths_before, aborts_before = _generated(url), _ran_to_length(url), _abort_calls(url)
    max_tokens = MAX_MODEL_LEN - 384
    body = {
        "model": "m",
        "messages": ask("tell a long story"),
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }

    # Leave once vLLM runs the request. Neither text nor a clock says when that is (many
    # tokens of a random-weight model detokenize to nothing visible; on a loaded machine
    # the whole answer can be generated before a timer fires), and vLLM's running gauge
    # is refreshed only every few seconds. The gateway's first frame is: it answers
    # only once the runtime's first chunk came (gateway/serving/dispatch.py reads it before the
    # answer starts), and vLLM then has thousands of tokens (tens of seconds) to go.
    # The client is a plain socket closed by hand: an HTTP client's cancelled stream
    # may keep its connection open until collected, and then the whole answer (a few
    # MB) fits in the loopback's buffers and the gateway never sees anyone leave.
    async def leave_once_running() -> None:
        gw = httpx.URL(str(client.base_url))
        payload = json.dumps(body).encode()
        reader, writer = await asyncio.open_connection(gw.host, gw.port)
        writer.write(
            f"POST {gw.path}chat/completions HTTP/1.1\r\nhost: {gw.host}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert b"data:" in await reader.readuntil(b"\n\n")
        # At once: this process's own timers lag while vLLM works (docs/vllm-cpu.md), so a
        # client that "waits a second" may leave only when the stream is over.
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    asyncio.run(leave_once_running())
    # The gateway called vLLM's abort endpoint with vLLM's id of the request...
    assert eventually(lambda: _abort_calls(url) == aborts_before + 1, 10, 0.1), _abort_calls(url) - aborts_before
    # ...and the engine stopped well short of what it was asked for (tens of seconds
    # of work), without running to its length.
    assert eventually(lambda: _running(url) == 0, 60, 0.1)
    generated = _generated(url) - generated_before
    assert generated < max_tokens, generated
    assert _ran_to_length(url) == lengths_before


def test_load_and_health_from_the_real_server(vllm_server):
    async def read():
        adapter = HTTPAdapter(VLLMDialect, "vllm-real", vllm_server.url, "tiny")
        try:
            return await adapter.health(), await adapter.load()
        finally:
            await adapter.aclose()

    health, load = asyncio.run(read())
    assert health.ok
    assert load.running is not None and load.waiting is not None
    assert load.kv_usage is not None and 0 <= load.kv_usage <= 1


async def test_its_kv_events_name_the_blocks_it_then_finds_cached(vllm_server, kv_ports):
    # The gateway's own subscriber and index, fed by the live server: after prompt a, the
    # index must predict exactly the prefix vLLM then reports cached for prompt b, which
    # shares a's head (hashes computed by the gateway from token ids, as routing does).
    pub, replay = kv_ports
    index = KVBlockIndex()
    sub = KVEventSubscriber(
        "vllm-real", f"tcp://127.0.0.1:{pub}", index, replay_endpoint=f"tcp://127.0.0.1:{replay}", topic="kv"
    )
    sub.start()
    a = [7 + (i * 37) % 480 for i in range(700)]
    b = a[:450] + [11 + (i * 53) % 480 for i in range(250)]
    try:
        async with httpx.AsyncClient(base_url=vllm_server.url, timeout=60) as http:
            await asyncio.sleep(0.5)  # a PUB socket drops what it sends before a subscriber joins

            async def complete(prompt: list[int]) -> int:
                body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0}
                r = await http.post("/v1/completions", json=body)
                assert r.status_code == 200, r.text
                return int((r.json()["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0)

            await complete(a)
            deadline = asyncio.get_running_loop().time() + 30
            while index.block_size is None or index.match(vllm_block_hashes(a, index.block_size)) == 0:
                assert asyncio.get_running_loop().time() < deadline, "no KV event reached the index"
                await asyncio.sleep(0.05)
            size = index.block_size
            assert index.match(vllm_block_hashes(a, size)) == len(a) // size  # every full block of a
            predicted = index.match(vllm_block_hashes(b, size))
            assert predicted == 450 // size  # the shared head's full blocks, none of b's own
            assert await complete(b) == predicted * size  # what vLLM found is what the index said
    finally:
        await sub.aclose()
    assert sub.stats.batches >= 1 and index.gaps == 0
