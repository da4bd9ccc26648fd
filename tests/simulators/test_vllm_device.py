"""The vLLM double's modelled device (`--prefill-ms-per-token`): one prefill at a time
in arrival order, lasting `ttft + F x uncached prompt tokens`; a cached prefix
shortens it; a client that leaves while waiting gives its place up at once. Real
simulator processes; the timings are compared as ratios, with wide margins (the
development machine is a loaded 2-core box)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

TTFT_MS = 40
PER_TOKEN_MS = 2.0
PROMPT = 160  # tokens: a cold prefill holds the device 40 + 320 = 360 ms


def _ids(base: int, n: int = PROMPT) -> list[int]:
    return [base + i for i in range(n)]


async def _ttft(http: httpx.AsyncClient, ids: list[int], t0: float | None = None) -> float:
    """Seconds from `t0` (default: the send) to the first streamed token."""
    start = time.monotonic() if t0 is None else t0
    body = {"model": "sim-model", "prompt": ids, "max_tokens": 2, "stream": True}
    async with http.stream("POST", "/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                return time.monotonic() - start
    raise AssertionError("no token streamed")


async def _gauge(http: httpx.AsyncClient, name: str) -> float:
    text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} missing")


@pytest.fixture(scope="module")
def device_sim(make_sim):
    return make_sim(
        "vllm", ttft_ms=TTFT_MS, itl_ms=1, prefill_ms_per_token=PER_TOKEN_MS, enable_prompt_tokens_details=True
    )


def test_prefills_run_one_at_a_time_and_a_cached_prefix_is_shorter(device_sim) -> None:
    async def main() -> tuple[float, float, float, float]:
        async with httpx.AsyncClient(base_url=device_sim.url, timeout=30) as http:
            first = asyncio.create_task(_ttft(http, _ids(10_000)))
            await asyncio.sleep(0.05)  # arrival order: the first one gets the device
            second = asyncio.create_task(_ttft(http, _ids(20_000)))
            await asyncio.sleep(0.1)
            waiting = await _gauge(http, "vllm:num_requests_waiting")
            a, b = await asyncio.gather(first, second)
            repeat = await _ttft(http, _ids(10_000))  # all 10 blocks cached
            return a, b, repeat, waiting

    a, b, repeat, waiting = asyncio.run(main())
    assert waiting == 1
    # The second waited for the first's whole prefill, then ran its own (+ the 50 ms head start).
    assert 1.5 < (b + 0.05) / a < 2.8, (a, b)
    # Cached: 40 ms instead of 360.
    assert repeat < 0.5 * a, (a, repeat)


def test_a_client_that_leaves_while_waiting_frees_the_device(device_sim) -> None:
    async def main() -> tuple[float, float]:
        async with httpx.AsyncClient(base_url=device_sim.url, timeout=30) as http:
            t0 = time.monotonic()
            first = asyncio.create_task(_ttft(http, _ids(30_000), t0))
            await asyncio.sleep(0.05)
            leaver = asyncio.create_task(_ttft(http, _ids(40_000)))
            await asyncio.sleep(0.05)
            third = asyncio.create_task(_ttft(http, _ids(50_000), t0))
            await asyncio.sleep(0.05)
            leaver.cancel()  # the client goes away while waiting for the device
            a = await first
            c = await third
            return a, c

    a, c = asyncio.run(main())
    # Freed: the third starts right after the first (about 2 x a from t0); had the
    # leaver kept its place, the third would start after it (about 3 x a).
    assert c / a < 2.5, (a, c)
    stats = httpx.get(device_sim.url + "/_sim/stats").json()
    assert stats["aborted"] >= 1


def test_a_client_that_leaves_while_prefilling_frees_the_device(device_sim) -> None:
    async def main() -> tuple[float, float, dict]:
        async with httpx.AsyncClient(base_url=device_sim.url, timeout=30) as http:
            solo = await _ttft(http, _ids(60_000))  # a cold prefill alone
            t0 = time.monotonic()
            leaver = asyncio.create_task(_ttft(http, _ids(70_000)))
            await asyncio.sleep(0.03)
            second = asyncio.create_task(_ttft(http, _ids(80_000), t0))
            await asyncio.sleep(0.07)
            leaver.cancel()  # gone 100 ms into its 360 ms prefill
            b = await second
            again = {"model": "sim-model", "prompt": _ids(70_000), "max_tokens": 1}
            usage = (await http.post("/v1/completions", json=again)).json()["usage"]
            return solo, b, {**(await http.get("/_sim/stats")).json(), "usage": usage}

    solo, b, stats = asyncio.run(main())
    # Freed at once: the second starts about 0.1 s after t0 (about 1.3 x solo); had the
    # leaver kept the device to the end of its prefill, about 2 x solo.
    assert b / solo < 1.7, (solo, b)
    assert stats["aborted"] >= 1
    # The abandoned prefill cached nothing: its prompt was still cold.
    assert stats["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert stats["in_flight"] == 0
