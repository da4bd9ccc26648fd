"""Issue 12, defects 2 and 6: one request must not wedge a backend for every tenant,
and a failed batch must not leave the backend's in-flight count behind.

Through a real gateway process: the prompts of a completion beyond the cap are a
400; two batches that together need more connections than the backend's pool
both finish (each sub-request gives its connection back when it ends) and so
does a third tenant's request; a pool held by hung streams answers 503
`backend_busy` with Retry-After within `pool_wait_s` (counted), not never; a
batch whose second prompt the runtime refuses, repeated, leaves the in-flight
gauge at zero and the backend unsaturated.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from gateway.config.schema import ConfigError, parse_config
from simulators.testing import start_simulator
from tests.adversity.fleet import auth, backend_inflight, scrape, sim_backend, start_fleet_gateway

POOL = 4  # connections to the backend; a request may start at most POOL - 1 generations


@pytest.fixture(scope="module")
def small_pool(module_tmp, upstream):
    backend = sim_backend("up-small", "openai", upstream.url, max_connections=POOL, pool_wait_s=0.5)
    gw = start_fleet_gateway(module_tmp, {"m": [backend]}, limits={"max_choices_per_request": POOL - 1})
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def default_gateway(module_tmp, upstream):
    gw = start_fleet_gateway(module_tmp, {"m": [sim_backend("up", "openai", upstream.url)]})
    yield gw
    gw.stop()


def completion(prompts: list[str], **sim) -> dict:
    body = {"model": "m", "prompt": prompts, "max_tokens": 1}
    if sim:
        body["sim"] = sim
    return body


def test_a_request_with_more_prompts_than_the_cap_is_refused_at_once(default_gateway, upstream):
    httpx.post(upstream.url + "/_sim/reset")
    r = httpx.post(default_gateway.url + "/v1/completions", json=completion(["hi"] * 300), headers=auth("attacker"))
    assert r.status_code == 400  # at once: nothing went upstream (below)
    err = r.json()["error"]
    assert err["param"] == "prompt" and err["code"] == "too_many_choices" and "128" in err["message"]
    assert httpx.get(upstream.url + "/_sim/stats").json()["total"] == 0  # nothing went upstream
    ok = httpx.post(default_gateway.url + "/v1/completions", json=completion(["hi"] * 128), headers=auth("victim"))
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 128


def test_a_cap_that_one_request_could_fill_a_pool_with_is_a_config_error():
    backend = {"name": "b", "adapter": "openai", "url": "http://127.0.0.1:9/v1", "max_connections": 64}
    with pytest.raises(ConfigError, match="max_choices_per_request"):
        parse_config({"models": {"m": {"backends": [backend]}}})  # the default cap, 128
    parse_config({"models": {"m": {"backends": [backend]}}, "limits": {"max_choices_per_request": 63}})


async def test_batches_needing_more_connections_than_the_pool_both_finish(small_pool, upstream):
    # Two batches of POOL - 1 prompts at once need more than POOL connections. When
    # each sub-request held its connection until all of its siblings had started,
    # they deadlocked; now both finish, and so does a third tenant's request.
    httpx.post(upstream.url + "/_sim/reset")
    batch = completion([f"p{i}" for i in range(POOL - 1)], ttft_ms=100)
    async with httpx.AsyncClient(base_url=small_pool.url, timeout=20) as c:
        answers = await asyncio.gather(  # deadlocked, they would end in the client's timeout
            c.post("/v1/completions", json=batch, headers=auth("attacker")),
            c.post("/v1/completions", json=batch, headers=auth("attacker")),
            c.post("/v1/completions", json=completion(["mine"], ttft_ms=100), headers=auth("victim")),
        )
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [len(a.json()["choices"]) for a in answers] == [POOL - 1, POOL - 1, 1]
    stats = httpx.get(upstream.url + "/_sim/stats").json()
    assert stats["completed"] == 2 * (POOL - 1) + 1 and stats["max_inflight"] <= POOL
    assert backend_inflight(small_pool, "up-small") == 0


async def test_a_pool_held_by_hung_streams_answers_backend_busy_within_the_pool_wait(small_pool, upstream):
    hold = {"model": "m", "prompt": "hold", "max_tokens": 400, "stream": True, "sim": {"chunks": 400, "itl_ms": 50}}
    async with httpx.AsyncClient(base_url=small_pool.url, timeout=30) as c:
        holders = []
        for _ in range(POOL):
            stream = c.stream("POST", "/v1/completions", json=hold, headers=auth("attacker"))
            resp = await stream.__aenter__()
            assert resp.status_code == 200
            holders.append(stream)
        try:
            t = time.monotonic()
            r = await c.post("/v1/completions", json=completion(["mine"]), headers=auth("victim"))
            waited = time.monotonic() - t
        finally:
            for stream in holders:
                await stream.__aexit__(None, None, None)
    # backend_busy after the pool wait; without it, an answer once the holders end (20 s).
    assert r.status_code == 503 and waited > 0.4
    err = r.json()["error"]
    assert err["code"] == "backend_busy" and int(r.headers["retry-after"]) >= 1
    assert "up-small" not in err["message"] and upstream.url.split("//")[1] not in err["message"]
    assert scrape(small_pool)['switchyard_backend_failures_total{backend="up-small",code="backend_busy"}'] >= 1


# ---- defect 6: the in-flight count of a batch with a refused prompt ------------------------


@pytest.fixture(scope="module")
def capped_vllm(module_tmp):
    sim = start_simulator("vllm", max_model_len=256)
    gw = start_fleet_gateway(module_tmp, {"m": [sim_backend("vllm-a", "vllm", sim.url, max_inflight=2)]})
    yield gw, sim
    gw.stop()
    sim.stop()


async def test_a_batch_with_a_refused_prompt_leaves_the_backend_idle(capped_vllm):
    gateway, sim = capped_vllm
    body = completion(["hello [[sim:ttft_ms=50]]", "too long " * 200])  # the second is over the context
    async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as c:
        for _ in range(10):
            r = await c.post("/v1/completions", json=body, headers=auth("attacker"))
            assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        metrics = scrape(gateway)
        assert metrics['switchyard_backend_inflight{backend="vllm-a"}'] == 0
        assert metrics['switchyard_admission_inflight{model="m"}'] == 0
        # max_inflight 2: had a slot leaked, these would queue behind it until they time out.
        answers = await asyncio.gather(
            *(c.post("/v1/completions", json=completion(["fine"]), headers=auth("victim")) for _ in range(4))
        )
    assert [a.status_code for a in answers] == [200] * 4
    assert sim.stats()["in_flight"] == 0
