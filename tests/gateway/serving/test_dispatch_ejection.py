"""Outlier ejection and the retry budget on the request path, in process, on
scripted adapters: which failures fail over, what the pool's outlier detector
learns from real requests, the half-open probe, the budget, the round count and
its doubling backoff, and what metrics and `/readyz` say about it."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from adapters.base import ErrorEvent, Finish, GenerationRequest, SamplingParams, TextDelta, Usage
from adapters.errors import FailureKind, GatewayError
from gateway.observe.ops import OpsCollector, model_health
from gateway.serving.dispatch import Dispatcher
from policies.ejection import CircuitState
from tests.gateway.scripted import ScriptedAdapter, always, backend_set
from tests.manual_clock import Clock


def chat(request_id: str = "req") -> GenerationRequest:
    return GenerationRequest(
        request_id=request_id,
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        sampling=SamplingParams(),
        stream=True,
    )


def answer(text: str = "ok") -> list:
    return [TextDelta(0, text), Finish(0, "stop"), Usage(5, 1)]


def runtime_500() -> GatewayError:
    # What the adapters make of a runtime's HTTP 500 (adapters/runtime_errors.py BACKEND_FAULT).
    return GatewayError(502, "The vllm backend serving this model failed: boom", code="upstream_error")


def overloaded() -> GatewayError:
    return GatewayError(429, "overloaded", code="upstream_overloaded", failure=FailureKind.OVERLOAD)


async def serve(dispatcher: Dispatcher, request_id: str = "req") -> str:
    dispatched = await dispatcher.open("m", [chat(request_id)])
    async for _ in dispatched.events:
        pass
    await dispatched.aclose()
    return dispatched.label


def pair(bad, model: dict | None = None) -> tuple[Dispatcher, ScriptedAdapter, ScriptedAdapter]:
    b1 = ScriptedAdapter("b1", bad)
    b2 = ScriptedAdapter("b2", lambda r: answer("from b2"))
    cfg = {"backends": ["b1", "b2"], "routing": "round_robin", "retry_backoff_s": 0.001, **(model or {})}
    return Dispatcher(backend_set({"m": cfg}, {"b1": b1, "b2": b2})), b1, b2


# ---- what fails over ---------------------------------------------------------------------------


@pytest.mark.parametrize("failure", [runtime_500(), overloaded()], ids=["runtime-500", "429"])
async def test_a_backend_fault_before_the_first_byte_fails_over(failure):
    dispatcher, b1, b2 = pair(always(failure), {"max_retries": 0})
    assert [await serve(dispatcher) for _ in range(4)] == ["b2"] * 4
    assert len(b1.requests) == 2 and len(b2.requests) == 4  # round robin sent b1 every second one


async def test_a_client_mistake_is_answered_at_once_and_ejects_nothing():
    bad_request = GatewayError(400, "bad prompt", param="messages")
    dispatcher, b1, b2 = pair(always(bad_request), {"max_retries": 3, "ejection": {"consecutive_failures": 1}})
    with pytest.raises(GatewayError) as info:
        await serve(dispatcher)
    assert info.value.status == 400
    assert (len(b1.requests), len(b2.requests)) == (1, 0)  # not retried, anywhere
    assert dispatcher.pool("m").ejection.state("b1") is CircuitState.CLOSED


# ---- ejection from real outcomes, and the half-open probe ---------------------------------------


async def test_a_backend_failing_every_request_is_ejected_and_then_gets_only_the_probe():
    dispatcher, b1, b2 = pair(always(runtime_500()), {"ejection": {"consecutive_failures": 3, "base_ejection_s": 5}})
    pool = dispatcher.pool("m")
    clock = pool.ejection.clock = Clock(1000.0)
    assert [await serve(dispatcher, f"r{i}") for i in range(20)] == ["b2"] * 20  # no client saw an error
    assert len(b1.requests) == 3  # three failures in a row, then held out
    assert pool.ejection.state("b1") is CircuitState.OPEN
    clock.now += 5  # the backoff is over: one real request is the probe
    assert [await serve(dispatcher, f"p{i}") for i in range(10)] == ["b2"] * 10
    assert len(b1.requests) == 4  # exactly one probe; it failed, so b1 is out again, for longer
    assert pool.ejection.describe("b1") == {"circuit": "open", "reason": "probe_failed", "ejected_for_s": 10.0}


async def test_a_probe_that_succeeds_puts_the_backend_back():
    healthy = False

    def script(request):
        return answer("from b1") if healthy else [runtime_500()]

    dispatcher, b1, b2 = pair(script, {"ejection": {"consecutive_failures": 2, "base_ejection_s": 5}})
    pool = dispatcher.pool("m")
    clock = pool.ejection.clock = Clock(1000.0)
    for i in range(6):
        await serve(dispatcher, f"r{i}")
    assert pool.ejection.state("b1") is CircuitState.OPEN
    healthy, clock.now = True, clock.now + 5
    served = [await serve(dispatcher, f"p{i}") for i in range(6)]
    assert pool.ejection.state("b1") is CircuitState.CLOSED
    assert served.count("b1") == 3  # back in the rotation: the probe and then every second request


async def test_while_the_probe_is_out_no_other_request_reaches_the_backend():
    release = asyncio.Event()
    probing = False

    def script(request):
        return [release.wait, *answer("from b1")] if probing else [runtime_500()]

    dispatcher, b1, b2 = pair(script, {"ejection": {"consecutive_failures": 1, "base_ejection_s": 5}})
    pool = dispatcher.pool("m")
    clock = pool.ejection.clock = Clock(1000.0)
    await serve(dispatcher, "r0")
    assert pool.ejection.state("b1") is CircuitState.OPEN
    probing, clock.now = True, clock.now + 5
    b1.called.clear()
    opened = [asyncio.ensure_future(dispatcher.open("m", [chat(f"p{i}")])) for i in range(8)]
    await b1.called.wait()  # the probe reached b1
    # Until every request but the probe started on b2, or one more reached b1.
    while sum(t.done() for t in opened) < 7 and len(b1.requests) == 2:
        await asyncio.sleep(0)
    assert len(b1.requests) == 2 and pool.ejection.state("b1") is CircuitState.HALF_OPEN
    release.set()
    for t in opened:
        d = await t
        async for _ in d.events:
            pass
        await d.aclose()
    assert sorted(d.label for d in [t.result() for t in opened]) == ["b1"] + ["b2"] * 7
    assert pool.ejection.state("b1") is CircuitState.CLOSED


async def test_the_cap_keeps_a_failing_pool_in_service():
    # Both backends fail: at most half of the pool (one) is ejected, the other keeps taking requests.
    b1, b2 = ScriptedAdapter("b1", always(runtime_500())), ScriptedAdapter("b2", always(runtime_500()))
    model = {"backends": ["b1", "b2"], "max_retries": 0, "ejection": {"consecutive_failures": 1}}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1, "b2": b2}))
    for i in range(4):
        with pytest.raises(GatewayError):
            await serve(dispatcher, f"r{i}")
    states = [dispatcher.pool("m").ejection.state(b) for b in ("b1", "b2")]
    assert sorted(s.name for s in states) == ["CLOSED", "OPEN"]


# ---- rounds, backoff, budget ------------------------------------------------------------------------


async def test_attempts_are_max_retries_plus_one_and_the_backoff_doubles():
    stamps: list[float] = []

    def script(request):
        stamps.append(time.monotonic())
        return [GatewayError(503, "down", code="backend_unavailable", failure=FailureKind.CONNECT)]

    b1 = ScriptedAdapter("b1", script)
    model = {"backends": ["b1"], "max_retries": 3, "retry_backoff_s": 0.1, "ejection": {"consecutive_failures": 9}}
    waits = []
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1}))
    with pytest.raises(GatewayError) as info:
        await dispatcher.open("m", [chat("abc")], waits.append)
    assert info.value.status == 503
    assert [r.request_id for r in b1.requests] == ["abc", "abc.1", "abc.2", "abc.3"]
    assert waits == [True, False] * 3
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    # Lower bounds only (a loaded machine only makes them longer): 0.1, 0.2, 0.4 s.
    assert [g >= 0.1 * 2**k for k, g in enumerate(gaps)] == [True, True, True], gaps


async def test_a_spent_retry_budget_hands_the_error_to_the_client():
    b1 = ScriptedAdapter("b1", always(overloaded()))
    model = {
        "backends": ["b1"],
        "max_retries": 5,
        "retry_backoff_s": 0.001,
        "ejection": {"retry_ratio": 0, "min_retries": 2, "consecutive_failures": 99},
    }
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1}))
    with pytest.raises(GatewayError) as info:
        await serve(dispatcher)
    assert info.value.status == 429 and len(b1.requests) == 3  # the first try and the two retries the floor allows
    with pytest.raises(GatewayError):
        await serve(dispatcher)
    assert len(b1.requests) == 4  # budget spent: one try, no retry, no backoff
    assert dispatcher.pool("m").retry_budget.refused >= 1


# ---- what operators see ---------------------------------------------------------------------------


async def test_ejections_are_in_the_metrics_and_readyz_with_their_reason():
    dispatcher, b1, b2 = pair(always(runtime_500()), {"ejection": {"consecutive_failures": 2, "base_ejection_s": 30}})
    for i in range(4):
        await serve(dispatcher, f"r{i}")
    keys = SimpleNamespace(reload_errors=0)
    families = {f.name: f for f in OpsCollector(dispatcher.backends, lambda: keys).collect()}
    ejected = {s.labels["backend"]: s.value for s in families["switchyard_backend_ejected"].samples}
    assert ejected == {"b1": 1, "b2": 0}
    (count,) = [s for s in families["switchyard_backend_ejections"].samples if s.name.endswith("_total")]
    assert count.labels == {"model": "m", "backend": "b1", "reason": "consecutive_failures"} and count.value == 1
    entries = {e["backend"]: e for e in model_health(dispatcher.backends)["m"].backends}
    assert entries["b1"]["circuit"] == "open" and entries["b1"]["reason"] == "consecutive_failures"
    assert 0 < entries["b1"]["ejected_for_s"] <= 30
    assert entries["b2"]["circuit"] == "closed" and entries["b1"]["healthy"] is True  # the probe never saw it


async def test_a_failure_after_the_first_byte_is_neither_failed_over_nor_counted():
    broke = GatewayError(502, "cut", code="upstream_error")
    b1 = ScriptedAdapter("b1", always(TextDelta(0, "par"), broke))
    b2 = ScriptedAdapter("b2", lambda r: answer("from b2"))
    model = {"backends": ["b1", "b2"], "routing": "round_robin", "ejection": {"consecutive_failures": 1}}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1, "b2": b2}))
    dispatched = await dispatcher.open("m", [chat()])
    assert dispatched.backends == ("b1",)
    events = [e async for e in dispatched.events]
    await dispatched.aclose()
    assert events[0] == TextDelta(0, "par") and isinstance(events[-1], ErrorEvent)  # the stream ends in an error
    assert len(b2.requests) == 0  # the client had its first byte: no failover
    assert dispatcher.pool("m").ejection.state("b1") is CircuitState.CLOSED
