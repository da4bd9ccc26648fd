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
            repeat = await _ttft(http, _ids(10_000))  # 144 of 160 tokens cached
            return a, b, repeat, waiting

    a, b, repeat, waiting = asyncio.run(main())
    assert waiting == 1
    # The second waited for the first's whole prefill, then ran its own (+ the 50 ms head start).
    assert 1.5 < (b + 0.05) / a < 2.8, (a, b)
    # Cached: 40 + 2 x 16 = 72 ms instead of 360.
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
