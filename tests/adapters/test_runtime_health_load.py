"""Health and load of each runtime adapter against its simulator (real processes):
readiness while the runtime loads, and the load snapshot while work is in flight."""

from __future__ import annotations

import asyncio
import time

import pytest

from adapters.base import GenerationRequest, TextDelta
from adapters.http_adapter import HTTPAdapter
from adapters.sglang import SGLangDialect
from adapters.tgi import TGIDialect
from adapters.trtllm import TRTLLMDialect
from adapters.vllm import VLLMDialect
from simulators.testing import start_simulator

DIALECTS = {"vllm": VLLMDialect, "sglang": SGLangDialect, "trtllm": TRTLLMDialect, "tgi": TGIDialect}
FLAGS = {"sglang": {"enable_metrics": True}}


def slow_request(rid: str) -> GenerationRequest:
    return GenerationRequest(
        request_id=rid,
        model="m",
        stream=True,
        messages=[{"role": "user", "content": "go [[sim:output_tokens=300,itl_ms=20]]"}],
    )


@pytest.mark.parametrize("kind", list(DIALECTS))
async def test_load_while_requests_run(kind):
    sim = start_simulator(kind, model_name="tiny", **FLAGS.get(kind, {}))
    adapter = HTTPAdapter(DIALECTS[kind], "b", sim.url, "tiny")
    try:
        idle = await adapter.load()
        streams = [adapter.generate(slow_request(f"r{i}")) for i in range(3)]
        for s in streams:
            assert isinstance(await s.__anext__(), TextDelta)
        await asyncio.sleep(0.6)  # past TRT-LLM's shared-read interval: a fresh read
        busy = await adapter.load()
        for s in streams:
            await s.aclose()
    finally:
        await adapter.aclose()
        sim.stop()
    assert busy.running is not None and busy.running + (busy.waiting or 0) >= 3, busy
    assert busy.read_at >= idle.read_at > time.time() - 60
    if kind != "tgi":
        assert busy.kv_usage is not None and 0 <= busy.kv_usage <= 1
    if kind == "tgi":
        assert busy.prefix_hit_rate is None  # TGI has no prefix cache signal


# Every adapter reads "connection refused" the same way (HTTPAdapter.health); each
# runtime is checked all the same, in the default tier (about 3 s each).
@pytest.mark.parametrize("kind", list(DIALECTS))
async def test_not_ready_while_loading_then_ready(kind):
    sim = start_simulator(kind, wait=False, model_name="tiny", startup_delay=1.5)
    adapter = HTTPAdapter(DIALECTS[kind], "b", sim.url, "tiny")
    try:
        loading = await adapter.health()
        sim.wait_ready()
        deadline = time.monotonic() + 10
        ready = await adapter.health()
        while not ready.ok and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            ready = await adapter.health()
    finally:
        await adapter.aclose()
        sim.stop()
    assert not loading.ok and "loading" in loading.detail
    assert ready.ok, ready


async def test_sglang_warm_up_is_not_ready():
    sim = start_simulator("sglang", model_name="tiny", warmup_delay=5)
    adapter = HTTPAdapter(SGLangDialect, "b", sim.url, "tiny")
    try:
        warming = await adapter.health()
    finally:
        await adapter.aclose()
        sim.stop()
    assert not warming.ok and "503" in warming.detail
