"""`switchyard_gateway_overhead_seconds` is the gateway's own time: a request served
by the in-process native engine is not observed (the engine's compute shares the
process, so the gateway's part cannot be told apart), so SwitchyardGatewayOverheadHigh
never fires from the engine's work. Requests served over HTTP still are."""

from __future__ import annotations

import time

from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.recorder import RequestRecorder

ENGINE_S = 5.0  # what the engine "computed": far above any overhead bucket's scale


def observed(recorder: RequestRecorder, metrics: GatewayMetrics, backend: str) -> tuple[float, float]:
    ctx = RequestContext("rid", time.perf_counter() - ENGINE_S, "chat", model="m")
    ctx.upstream_wait = 0.001  # the first event came at once; the rest of the time ran in process
    recorder.finish(ctx, Outcome(200, backend=backend))
    get = metrics.registry.get_sample_value
    return (
        get("switchyard_gateway_overhead_seconds_count", {"model": "m"}) or 0.0,
        get("switchyard_gateway_overhead_seconds_sum", {"model": "m"}) or 0.0,
    )


def test_a_native_backends_requests_stay_out_of_the_overhead_histogram():
    engine = {"name": "engine", "adapter": "native", "model_path": "builtin:tiny"}
    remote = {"name": "remote", "adapter": "vllm", "url": "http://127.0.0.1:9"}
    backends = BackendSet(parse_config({"models": {"m": {"backends": [engine, remote]}}}))
    metrics = GatewayMetrics()
    recorder = RequestRecorder(metrics, {"m"}, None, in_process=backends.serves_in_process)
    assert observed(recorder, metrics, "engine") == (0.0, 0.0)
    count, total = observed(recorder, metrics, "remote")
    assert count == 1 and total >= ENGINE_S - 1  # the HTTP backend's request is observed as before
