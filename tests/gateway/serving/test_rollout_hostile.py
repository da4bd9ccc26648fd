"""A rollout's request path against hostile use: a tenant sending 10,000 distinct
session ids grows nothing (assignment keeps nothing of a key; the session table stays
in its bounds; the metrics' label sets stay two tracks); a client that leaves is not
recorded and its mirror copy is cancelled."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import httpx
import pytest

from adapters.base import GenerationRequest
from simulators.testing import start_simulator
from tests.gateway.live_gateway import serving
from tests.gateway.serving.rollout_kit import STABLE_TOKENS, Controller, rolled_out


@pytest.fixture(scope="module")
def sims():
    with start_simulator("vllm", output_tokens=STABLE_TOKENS) as stable:
        # answers its first token at once, then one a second: a stream a client can leave
        with start_simulator("vllm", itl_ms=1000, output_tokens=60) as slow:
            yield stable, slow


async def test_ten_thousand_session_ids_grow_nothing(sims):
    stable, _ = sims
    config = rolled_out(stable.url, stable.url)
    config["models"]["m"] |= {"routing": "blended", "session_affinity": {"max_sessions": 100}}
    async with serving(config, rollouts=Controller(candidate=0.25)) as served:
        gw = served.gateway
        pool = gw.backends.pools["m"]

        def request(i: int) -> GenerationRequest:
            return GenerationRequest(
                f"r{i}",
                "m",
                messages=[{"role": "user", "content": "hi"}],
                tenant="t",
                session_keys={"x-session-id": f"{i}" * 8},
            )

        def route(first: int, count: int) -> None:
            for i in range(first, first + count):
                req = request(i)
                rollout = gw.dispatcher.assign("m", [req])
                assert rollout is not None
                pool.route(req, rollout.assigned)

        route(0, 1000)  # warm every cache the path has
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        route(1000, 10_000)
        gc.collect()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
        tracemalloc.stop()
        assert len(pool.sessions) == 100
        assert grown < 200_000, grown  # 10,000 kept keys would take megabytes

        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            for i in range(60):
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
                r = await client.post("/v1/chat/completions", json=body, headers={"x-session-id": f"hostile-{i}"})
                assert r.status_code == 200
        tracks = {
            sample.labels["track"]
            for family in gw.metrics.registry.collect()
            if family.name == "switchyard_requests"
            for sample in family.samples  # the requests counter's label sets
        }
        assert tracks == {"stable", "candidate"}


async def test_a_client_that_leaves_is_not_recorded_and_its_copy_is_cancelled(sims):
    _, slow = sims
    controller = Controller(mirror=1.0)
    # The stable answer is slow here, the copy too: the client leaves while both run.
    async with serving(rolled_out(slow.url, slow.url, mirror={"share": 1.0}), rollouts=controller) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                async with asyncio.timeout(20):
                    while slow.stats()["in_flight"] < 2:  # the original and its copy
                        await asyncio.sleep(0.02)
        async with asyncio.timeout(20):
            while served.metric("switchyard_rollout_mirror_copies_total", model="m", result="cancelled") < 1:
                await asyncio.sleep(0.02)
            while slow.stats()["in_flight"]:
                await asyncio.sleep(0.02)
    assert controller.records == [] and controller.comparisons == []
