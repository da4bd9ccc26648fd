"""What a fanned-out `n` means, through the whole HTTP path to a TGI simulator (TGI
has no native `n`: the gateway sends one request per choice, gateway/serving/dispatch.py).

* Seeds: choice i is sampled with `seed + i`, so the choices differ and the same
  request gives the same choices again. The oracle is the simulator itself: its text
  depends on the request's seed (simulators/tokens.py), so choice i of an `n: 4`
  request with seed S must be the one choice of an `n: 1` request with seed S + i.
* Usage: the prompt was read by every sub-request but is counted once; the
  completion tokens are every choice's.
* Cancelling: a client that leaves a fan-out aborts every sub-request at the
  simulator; a sub-request refused at its start closes the ones already running.
The simulator's own state (its requests in flight, aborted, completed, refused) is
what is checked, never a gateway counter alone."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from simulators.testing import start_in_process
from tests.gateway.live_gateway import serving

PROMPT = [{"role": "user", "content": "tell me about the fan out"}]


@pytest.fixture(scope="module")
def sim():
    # Slow tokens (50 x 40 ms = 2 s a choice) so a leaving client finds every
    # sub-request still running; at most 3 at once, for the refused start.
    with start_in_process("tgi", health_latency=0.0, itl_ms=40, output_tokens=50, max_concurrent_requests=3) as s:
        yield s


def config(sim) -> dict:
    backend = {"name": "t1", "adapter": "tgi", "url": sim.url, "served_model": "sim-model"}
    return {"access_log": False, "models": {"m": {"backends": [backend], "max_retries": 0}}}


def body(**kw: Any) -> dict:
    return {"model": "m", "messages": PROMPT, "max_tokens": 4, **kw}


def texts(answer: dict) -> list[str]:
    choices = sorted(answer["choices"], key=lambda c: c["index"])
    assert [c["index"] for c in choices] == list(range(len(choices)))
    return [c["message"]["content"] for c in choices]


async def test_seeded_choices_differ_reproduce_and_follow_seed_plus_index(sim):
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as client:

        async def ask(**kw: Any) -> dict:
            r = await client.post("/v1/chat/completions", json=body(**kw))
            assert r.status_code == 200, r.text
            return r.json()

        first = texts(await ask(n=3, seed=7))
        again = texts(await ask(n=3, seed=7))
        singles = [texts(await ask(seed=7 + i))[0] for i in range(3)]
    assert len(set(first)) == 3, first  # every choice its own sample
    assert again == first  # reproducible
    assert first == singles  # choice i drew with seed 7 + i


async def test_usage_counts_the_prompt_once_and_every_choices_completion(sim):
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        one = (await client.post("/v1/chat/completions", json=body())).json()["usage"]
        three = (await client.post("/v1/chat/completions", json=body(n=3, seed=1))).json()["usage"]
        streamed = await client.post(
            "/v1/chat/completions", json=body(n=3, seed=1, stream=True, stream_options={"include_usage": True})
        )
    frames = [orjson.loads(f.removeprefix("data: ")) for f in streamed.text.split("\n\n") if f and "[DONE]" not in f]
    stream_usage = frames[-1]["usage"]
    assert one["prompt_tokens"] > 0 and one["completion_tokens"] == 4
    assert three["prompt_tokens"] == one["prompt_tokens"]  # read three times, counted once
    assert three["completion_tokens"] == 3 * 4
    assert three["total_tokens"] == one["prompt_tokens"] + 12
    assert stream_usage == three
    await sim.settled()


async def test_a_client_leaving_a_fan_out_aborts_every_sub_request(sim):
    before = await sim.settled()
    async with serving(config(sim)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            req = body(n=3, seed=3, stream=True, max_tokens=50)
            async with client.stream("POST", "/v1/chat/completions", json=req) as r:
                assert r.status_code == 200
                chunks = r.aiter_bytes()  # held: leaving the loop would close the response
                await chunks.__anext__()  # the first chunk: every choice has started (together)
                running = await asyncio.to_thread(sim.stats)
                assert running["in_flight"] == 3
            # Out of the block: the response is closed, the client has left.
        after = await sim.settled()
    assert after["aborted"] == before["aborted"] + 3
    assert after["completed"] == before["completed"]


async def test_a_sub_request_refused_at_its_start_closes_the_ones_running(sim):
    """Four choices against a runtime that holds three: the fourth is refused (TGI's
    429), and the three that started are closed, not left to run for nobody."""
    before = await sim.settled()
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        r = await client.post("/v1/chat/completions", json=body(n=4, seed=5, max_tokens=50))
        after = await sim.settled()
    assert r.status_code in (429, 503), r.text
    assert "error" in r.json()
    refused = after["statuses"].get("429", 0) - before["statuses"].get("429", 0)
    accepted = after["requests_total"] - before["requests_total"] - refused
    assert refused >= 1 and accepted >= 1
    assert after["aborted"] - before["aborted"] == accepted  # every one that started was closed
    assert after["completed"] == before["completed"]
