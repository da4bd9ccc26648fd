"""Model pools built from config: the views routing reads carry each adapter's
capabilities, and routing and admission share the model's saturation thresholds.
No runtime is contacted: nothing here gets past routing."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest, LoadSnapshot
from adapters.errors import GatewayError
from gateway.backends.backend import Backend
from gateway.backends.backend_set import BackendSet
from gateway.backends.pool import ModelPool
from gateway.config.schema import BackendConfig, ModelConfig, parse_config
from gateway.serving.dispatch import Dispatcher
from policies.saturation import DEFAULT_DETECTOR, SaturationDetector

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def backend(name: str, adapter: str, **kw) -> dict:
    return {"name": name, "adapter": adapter, "url": "http://127.0.0.1:9", **kw}


@pytest.fixture
async def backends():
    config = parse_config(
        {
            "models": {
                "mixed": {"backends": [backend("t", "trtllm", options={"tools": False}), backend("v", "vllm")]},
                "no-tools": {
                    "backends": [
                        backend("t1", "trtllm", options={"tools": False}),
                        backend("t2", "trtllm", options={"tools": False}),
                    ]
                },
                "strict": {
                    "saturation": {"queue_depth": 2, "kv_cache_utilization": 0.5, "max_load_age_s": 1.5},
                    "backends": [backend("s", "vllm", max_inflight=4), backend("s2", "vllm", max_inflight=4)],
                },
            }
        }
    )
    bs = BackendSet(config)
    yield bs
    await bs.aclose()


def tool_request(model: str) -> GenerationRequest:
    return GenerationRequest("r", model, messages=[{"role": "user", "content": "hi"}], tools=TOOLS)


async def test_the_capability_filter_reads_each_adapters_declared_capabilities(backends):
    routed = backends.pools["mixed"].route(tool_request("mixed"))
    assert [b.name for b in routed.candidates] == ["v"]
    assert [str(g) for g in routed.refused] == ["t (trtllm) does not support tool calls"]


async def test_a_request_no_backend_can_serve_is_a_400_naming_each_runtime(backends):
    with pytest.raises(GatewayError) as exc:
        await Dispatcher(backends).open("no-tools", [tool_request("no-tools")])
    assert exc.value.status == 400 and exc.value.code == "unsupported_by_runtime"
    # The runtime and what it lacks, once; never the backends' names (a tenant reads this).
    assert exc.value.message == "This request cannot be served: trtllm does not support tool calls."


async def test_saturation_thresholds_come_from_the_models_config(backends):
    assert backends.pools["strict"].detector == SaturationDetector(
        queue_depth=2, kv_cache_utilization=0.5, max_load_age_s=1.5
    )
    assert backends.pools["mixed"].detector == DEFAULT_DETECTOR


async def test_admission_and_routing_use_the_pools_thresholds(backends):
    pool = backends.pools["strict"]
    s, _ = pool.backends
    s.inflight = 1
    s.load = LoadSnapshot(waiting=2, kv_usage=0.1)  # saturated at queue depth 2, not at the default 5
    assert pool.capacity() == 1 + 4  # it holds what it has; the other its max_inflight
    routed = pool.route(tool_request("strict")).candidates
    assert [v.name for v in routed] == ["s2", "s"] and routed[-1].saturated  # saturated last
    s.load = LoadSnapshot(waiting=1, kv_usage=0.1)
    assert pool.capacity() == 4 + 4
    assert not any(v.saturated for v in pool.route(tool_request("strict")).candidates)


def test_a_pools_fingerprint_follows_its_backend_configuration():
    # OpenAI's system_fingerprint: the same for the same backends, changed by a changed one
    def pool(url: str, served: str = "x") -> ModelPool:
        cfg = BackendConfig(name="b", adapter="vllm", url=url, served_model=served)
        model = ModelConfig(backends=[cfg])
        return ModelPool("m", model, [Backend(cfg, object())])  # type: ignore[arg-type]

    first = pool("http://a:1").fingerprint
    assert first.startswith("fp_") and len(first) == 13
    assert pool("http://a:1").fingerprint == first
    assert pool("http://a:2").fingerprint != first
    assert pool("http://a:1", served="y").fingerprint != first
