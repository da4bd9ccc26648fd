"""Issue 12, defect 7: a fan-out counts as what it is, and runs in parallel.

Through a real gateway process in front of the TGI simulator (TGI has no native
`n`, so the gateway fans out one request per choice): an `n: 8` request takes
about as long as one choice (a ratio, not a wall-clock ceiling), its choices
stream from the start together, and the simulator saw 8 at once; a backend with
`max_inflight: 8` runs two such requests one after the other (8 at the
simulator, never 16); a tenant with `max_concurrent: 4` asking for 8 gets a 429
naming `n` (it could never fit: there is no queueing for it), 4 at a time runs;
prompts x n above `limits.max_choices_per_request` is a 400 naming the parameter.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from simulators.testing import start_simulator
from tests.adversity.fleet import auth, key_of, sim_backend, sse_events, start_fleet_gateway, tenancy

TTFT_MS = 300
TENANTS = {"victim": {}, "small": {"max_concurrent": 4}}


@pytest.fixture(scope="module")
def tgi_fleet(module_tmp):
    sim = start_simulator("tgi", ttft_ms=TTFT_MS, itl_ms=5, output_tokens=4)
    models = {
        "tgi": [sim_backend("tgi-a", "tgi", sim.url)],
        "tgi-capped": [sim_backend("tgi-capped", "tgi", sim.url, max_inflight=8)],
    }
    gw = start_fleet_gateway(module_tmp, models, limits={"max_choices_per_request": 64}, **tenancy(TENANTS))
    yield gw, sim
    gw.stop()
    sim.stop()


def chat_body(n: int, model: str = "tgi", stream: bool = False) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "tell me"}],
        "max_tokens": 4,
        "n": n,
        "stream": stream,
    }


async def timed(c: httpx.AsyncClient, body: dict, tenant: str = "victim") -> float:
    t = time.monotonic()
    r = await c.post("/v1/chat/completions", json=body, headers=auth(tenant))
    assert r.status_code == 200 and len(r.json()["choices"]) == body["n"]
    return time.monotonic() - t


async def test_a_fan_out_runs_its_choices_in_parallel(tgi_fleet):
    gw, sim = tgi_fleet
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        one = min([await timed(c, chat_body(1)) for _ in range(2)])
        sim.reset()
        eight = min([await timed(c, chat_body(8)) for _ in range(2)])
    # In parallel: all eight upstream calls were in flight at once (in series, one at a
    # time). The answer times are the machine's business, not the test's.
    assert one > 0 and eight > 0
    assert sim.stats()["max_in_flight"] == 8


async def test_a_streamed_fan_out_starts_every_choice_together(tgi_fleet):
    gw, sim = tgi_fleet
    sim.reset()
    first_seen: dict[int, float] = {}
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        t = time.monotonic()
        async with c.stream(
            "POST", "/v1/chat/completions", json=chat_body(8, stream=True), headers=auth("victim")
        ) as r:
            async for line in r.aiter_lines():
                for event in sse_events(line.encode() + b"\n"):
                    if event == "[DONE]":
                        continue
                    for choice in event["choices"]:
                        if choice["delta"].get("content"):
                            first_seen.setdefault(choice["index"], time.monotonic() - t)
    assert sorted(first_seen) == list(range(8))
    # Together: the eight upstream streams were open at once (in series, one at a time).
    assert sim.stats()["max_in_flight"] == 8


async def test_a_capped_backend_runs_two_fan_outs_one_after_the_other(tgi_fleet):
    gw, sim = tgi_fleet
    sim.reset()
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        times = await asyncio.gather(timed(c, chat_body(8, "tgi-capped")), timed(c, chat_body(8, "tgi-capped")))
    stats = sim.stats()
    assert stats["max_in_flight"] == 8 and stats["completed"] == 16
    assert max(times) > 1.5 * min(times)  # the second waited for the first to finish


async def test_a_tenant_cannot_run_more_generations_than_its_concurrency_limit(tgi_fleet):
    gw, sim = tgi_fleet
    small = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=key_of("small"), max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError) as info:
        await small.chat.completions.create(**chat_body(8))
    assert "retry-after" not in info.value.response.headers
    err = info.value.body
    assert err["code"] == "request_exceeds_concurrency_limit" and err["param"] == "n" and "4" in err["message"]
    sim.reset()
    answer = await small.chat.completions.create(**chat_body(4))
    assert len(answer.choices) == 4 and sim.stats()["max_in_flight"] == 4
    # While 4 run, not even one more fits.
    running = asyncio.create_task(small.chat.completions.create(**chat_body(4)))
    await asyncio.sleep(TTFT_MS / 3000)
    with pytest.raises(openai.RateLimitError):
        await small.chat.completions.create(**chat_body(1))
    assert len((await running).choices) == 4


@pytest.mark.parametrize("prompts, n, param", [(65, 1, "prompt"), (9, 8, "n")])
async def test_more_choices_than_the_cap_is_a_400_naming_the_parameter(tgi_fleet, prompts, n, param):
    gw, sim = tgi_fleet
    sim.reset()
    client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=key_of("victim"), max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError) as info:
        await client.completions.create(model="tgi", prompt=["p"] * prompts, n=n, max_tokens=2)
    assert info.value.body["param"] == param and info.value.body["code"] == "too_many_choices"
    assert sim.stats()["requests_total"] == 0
