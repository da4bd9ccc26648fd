"""Issue 12, defect 3: one tenant must not reach another tenant's generation.

Two tenants send the same `x-request-id` (and the same id in `request_id` and
`rid` body fields). The victim streams 60 tokens while the attacker, with that
id, sends a request the runtime refuses and a stream it walks away from, on
every adapter: the four runtime simulators, the generic OpenAI upstream and the
native engine. The victim's generation runs to its end, the id the runtime saw
is never the client's, and the simulators' `/_sim/stats` show that only the
attacker's own generations were aborted.
"""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import openai
import pytest

from adapters.base import Finish, GenerationRequest, SamplingParams, Usage
from adapters.errors import GatewayError
from gateway.http.request_io import client_request_id, new_request_id
from simulators.testing import start_simulator
from tests.adversity.fleet import RUNTIMES, auth, key_of, sim_backend, start_fleet_gateway, tenancy
from tests.native_adapters import started_native
from tests.procs import native_backend_config, start_native_gateway, start_upstream, stopped_after

SHARED_ID = "trace-abc-1"
VICTIM_TOKENS = 60
VICTIM_PROMPT = f"victim story [[sim:output_tokens={VICTIM_TOKENS},itl_ms=15]]"
ABANDONED_PROMPT = f"attacker stream [[sim:output_tokens={VICTIM_TOKENS},itl_ms=15]]"
REFUSED_PROMPT = "attacker refused [[sim:status=500]]"
GATEWAY_ID = re.compile(r"[0-9a-f]{32}")


def test_the_gateways_ids_are_random_and_unique():
    ids = {new_request_id() for _ in range(10_000)}
    assert len(ids) == 10_000 and all(GATEWAY_ID.fullmatch(i) for i in ids)


@pytest.mark.parametrize(
    "value, kept",
    [
        ("trace-abc-1", True),
        ("a.b:c_D-9", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("has space", False),
        ("new\nline", False),
        ("emoji-\u2603", False),
        ("slash/path", False),
        (None, False),
    ],
)
def test_a_client_request_id_is_kept_only_when_it_is_short_and_plain(value, kept):
    assert client_request_id(value) == (value if kept else None)


@pytest.fixture(scope="module")
def fleet(module_tmp):
    sims = {kind: start_simulator(kind) for kind in RUNTIMES}
    upstream = start_upstream(module_tmp)
    models = {kind: [sim_backend(f"{kind}-a", kind, sim.url)] for kind, sim in sims.items()}
    models["openai"] = [sim_backend("openai-a", "openai", upstream.url)]
    gateway = start_fleet_gateway(module_tmp, models, access_log=True)
    yield gateway, sims, upstream
    gateway.stop()
    upstream.stop()
    for sim in sims.values():
        sim.stop()


def client(gateway, tenant: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=gateway.url + "/v1",
        api_key=key_of(tenant),
        max_retries=0,
        timeout=30,
        default_headers={"x-request-id": SHARED_ID},
    )


def upstream_script(model: str, **sim) -> dict:
    """The generic upstream reads its script from a `sim` body field (the runtime
    simulators read the markers in the prompts)."""
    return {"sim": sim} if model == "openai" else {}


async def victim_stream(gateway, model: str, first_chunk: asyncio.Event) -> tuple[int, str | None]:
    """The victim's whole stream: completion tokens (from usage) and the finish reason."""
    stream = await client(gateway, "victim").chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": VICTIM_PROMPT}],
        max_tokens=VICTIM_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=upstream_script(model, chunks=2 * VICTIM_TOKENS, itl_ms=15),
    )
    return await read_to_the_end(stream, first_chunk)


async def read_to_the_end(stream, first_chunk: asyncio.Event) -> tuple[int, str | None]:
    """A victim's whole stream (`first_chunk` set on its first chunk): its completion
    tokens (from usage) and its last finish reason."""
    finish, tokens = None, 0
    async for chunk in stream:
        first_chunk.set()
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return tokens, finish


async def attack(gateway, model: str) -> None:
    """With the victim's request id everywhere: a request the runtime refuses, then
    a stream the attacker leaves after its first chunk."""
    extra = {"request_id": SHARED_ID, "rid": SHARED_ID} if model in ("vllm", "sglang", "openai") else {}
    attacker = client(gateway, "attacker")
    with pytest.raises(openai.APIError):
        await attacker.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": REFUSED_PROMPT}],
            max_tokens=4,
            extra_body={**extra, **upstream_script(model, status=500)},
        )
    body = {
        "model": model,
        "messages": [{"role": "user", "content": ABANDONED_PROMPT}],
        "max_tokens": VICTIM_TOKENS,
        "stream": True,
        **extra,
        **upstream_script(model, chunks=VICTIM_TOKENS, itl_ms=15),
    }
    async with httpx.AsyncClient(timeout=30) as raw:
        async with raw.stream(
            "POST",
            gateway.url + "/v1/chat/completions",
            json=body,
            headers=auth("attacker", **{"x-request-id": SHARED_ID}),
        ) as resp:
            assert resp.status_code == 200
            async for _ in resp.aiter_bytes():
                break  # and leave


def sent_ids(request: dict) -> set[str]:
    """Every id a recorded upstream request carried."""
    body = request.get("body") if isinstance(request.get("body"), dict) else {}
    ids = {request["headers"].get("x-request-id"), body.get("rid"), body.get("request_id")}
    return {i for i in ids if i}


def prompt_of(request: dict) -> str:
    body = request.get("body") if isinstance(request.get("body"), dict) else {}
    return str(body.get("messages") or body.get("prompt") or "")


async def wait_for_aborts(sim, count: int) -> dict:
    for _ in range(100):
        stats = sim.stats()
        if stats["aborted"] >= count:
            return stats
        await asyncio.sleep(0.05)
    return sim.stats()


@pytest.mark.parametrize("model", RUNTIMES)
async def test_nothing_one_tenant_does_with_a_shared_id_reaches_the_others_generation_on_a_runtime(fleet, model):
    gateway, sims, _ = fleet
    sim = sims[model]
    sim.reset()
    first_chunk = asyncio.Event()
    victim = asyncio.create_task(victim_stream(gateway, model, first_chunk))
    await asyncio.wait_for(first_chunk.wait(), 10)
    await attack(gateway, model)
    assert await asyncio.wait_for(victim, 30) == (VICTIM_TOKENS, "length")

    stats = await wait_for_aborts(sim, 1)
    requests = [r for r in stats["last_requests"] if "completions" in r["path"]]
    assert len(requests) == 3
    # The runtime never saw the clients' id, and each generation had an id of its own.
    ids = [sent_ids(r) for r in requests]
    assert all(SHARED_ID not in i for i in ids)
    assert all(GATEWAY_ID.match(i) for group in ids for i in group)
    assert len({frozenset(i) for i in ids}) == 3
    # Only the attacker's generations were aborted (SGLang by rid, the rest by disconnect).
    victims = set().union(*(i for r, i in zip(requests, ids) if "victim story" in prompt_of(r)))
    aborted = {a["request_id"] for a in stats["aborts"]}
    assert not victims & aborted
    assert stats["aborted"] >= 1 and stats["completed"] >= 1
    assert stats["finish_reasons"].get("abort", 0) == 0


async def test_the_same_holds_for_the_generic_openai_upstream(fleet):
    gateway, _, upstream = fleet
    httpx.post(upstream.url + "/_sim/reset")
    first_chunk = asyncio.Event()
    victim = asyncio.create_task(victim_stream(gateway, "openai", first_chunk))
    await asyncio.wait_for(first_chunk.wait(), 10)
    await attack(gateway, "openai")
    assert await asyncio.wait_for(victim, 30) == (VICTIM_TOKENS, "length")
    stats = httpx.get(upstream.url + "/_sim/stats").json()
    # The upstream saw none of the clients' ids in the bodies the gateway sent.
    assert all(SHARED_ID not in str(b) for b in stats["bodies"])
    assert stats["aborted"] >= 1 and stats["completed"] >= 1


def test_the_response_header_keeps_a_plain_client_id_and_replaces_any_other(fleet):
    gateway, _, _ = fleet
    body = {"model": "openai", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for sent, kept in [(SHARED_ID, True), ("bad id\twith tab", False), ("z" * 300, False)]:
        r = httpx.post(
            gateway.url + "/v1/chat/completions", json=body, headers=auth("victim", **{"x-request-id": sent})
        )
        assert r.status_code == 200
        echoed = r.headers["x-request-id"]
        assert echoed == sent if kept else GATEWAY_ID.fullmatch(echoed)
        # The response id is the gateway's, never the client's.
        assert r.json()["id"].startswith("chatcmpl-") and "trace" not in r.json()["id"]
    # The access log keeps both: the client's id, and the gateway's the runtime saw (the
    # last line with that id is this test's: the attacks before it sent the same id).
    record = [
        json.loads(line)
        for line in gateway.child.log().splitlines()
        if line.startswith("{") and f'"request_id":"{SHARED_ID}"' in line
    ][-1]
    assert GATEWAY_ID.fullmatch(record["upstream_id"]) and record["tenant"] == "victim"


# ---- the native engine ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def native_adapter(tiny_model_dir):
    yield from started_native(tiny_model_dir, one_thread=True, max_model_len=512, num_blocks=256, max_num_seqs=8)


def native_request(prompt: str, max_tokens: int, request_id: str = SHARED_ID) -> GenerationRequest:
    sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return GenerationRequest(request_id, "tiny", kind="completion", prompt=prompt, sampling=sampling, stream=True)


async def test_two_engine_requests_under_one_id_do_not_reach_each_other(native_adapter):
    # Even under one request id (the gateway never sends one twice), the engine's
    # sequences are apart: the attacker's refused request and its abandoned stream
    # leave the victim's generation running to its end.
    victim = native_adapter.generate(native_request("once upon a time", 120))
    first = await anext(victim)
    with pytest.raises(GatewayError) as info:
        await anext(native_adapter.generate(native_request("word " * 600, 4)))
    assert info.value.code == "context_length_exceeded"
    abandoned = native_adapter.generate(native_request("another tale", 120))
    await anext(abandoned)
    await abandoned.aclose()
    events = [first, *[e async for e in victim]]
    assert events[-1] == Usage(prompt_tokens=events[-1].prompt_tokens, completion_tokens=120, cached_tokens=0)
    assert [e.reason for e in events if isinstance(e, Finish)] == ["length"]


@pytest.fixture(scope="module")
def native_gateway(module_tmp, tiny_model_dir):
    config = native_backend_config(tiny_model_dir, max_model_len=512, num_blocks=512, max_num_seqs=8)
    yield from stopped_after(start_native_gateway(module_tmp, {**config, **tenancy(), "access_log": False}))


@pytest.mark.slow  # a gateway process with the engine: a minute on a loaded 2-core machine
async def test_nothing_one_tenant_does_reaches_the_others_generation_on_the_native_engine(native_gateway):
    gw = native_gateway
    tokens = 120
    victim_client = client(gw, "victim")
    first_chunk = asyncio.Event()

    async def victim() -> tuple[int, str | None]:
        stream = await victim_client.completions.create(
            model="tiny",
            prompt="once upon a time",
            max_tokens=tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        return await read_to_the_end(stream, first_chunk)

    task = asyncio.create_task(victim())
    await asyncio.wait_for(first_chunk.wait(), 60)
    attacker = client(gw, "attacker")
    with pytest.raises(openai.BadRequestError):  # longer than the context: refused by the engine
        await attacker.completions.create(model="tiny", prompt="word " * 600, max_tokens=4)
    body = {"model": "tiny", "prompt": "another tale", "max_tokens": tokens, "stream": True, "ignore_eos": True}
    async with httpx.AsyncClient(timeout=60) as raw:
        async with raw.stream(
            "POST", gw.url + "/v1/completions", json=body, headers=auth("attacker", **{"x-request-id": SHARED_ID})
        ) as resp:
            assert resp.status_code == 200
            async for _ in resp.aiter_bytes():
                break
    assert await asyncio.wait_for(task, 120) == (tokens, "length")
