"""A one-shot call (gateway/serving/oneshot.py) run by the exchange runner, in process with a real
Protection and adapters whose `embed` is scripted: only capable backends, in routing
order; failover on a retryable failure only; the ticket released once, with the real
usage, or for the phase the client left in; the backends' in-flight counts back to 0."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from adapters.base import Adapter, Capabilities, Health, Usage
from adapters.errors import FailureKind, GatewayError
from adapters.oneshot import EmbeddingRequest, EmbeddingResult
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config
from gateway.intake import Admitted, Intent, capable_order
from gateway.observe.context import RequestContext
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.recorder import RequestRecorder
from gateway.protection.gate import Protection
from gateway.serving.oneshot import OneShotCall, route_request
from gateway.serving.phases import CancelPhase
from tests.gateway.scripted import backend_set, count_releases
from tests.procs import sample_value

HANG = object()


class EmbedAdapter(Adapter):
    """`embed` answers from its script: a result, a GatewayError raised, or HANG (until cancelled)."""

    runtime = "scripted"

    def __init__(self, name: str, answer: Any, embeddings: bool = True) -> None:
        super().__init__(name)
        self.capabilities = Capabilities(embeddings=embeddings)
        self.answer = answer
        self.calls = 0
        self.cancelled = False

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        self.calls += 1
        if isinstance(self.answer, GatewayError):
            raise self.answer
        if self.answer is HANG:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        return self.answer

    def generate(self, request):  # type: ignore[override]
        raise AssertionError("a call that generates nothing never generates")

    async def health(self) -> Health:
        return Health(True, "scripted")

    async def models(self) -> list[str]:
        return []


RESULT = EmbeddingResult([[1.0, 0.0]], prompt_tokens=4)
CALL = EmbeddingRequest("rid", "m", inputs=["hello"])


async def run_call(
    adapters: dict[str, EmbedAdapter],
    leave_after: float | None = None,
    backends: BackendSet | None = None,
    reload_drops_model: bool = False,
) -> dict[str, Any]:
    if backends is None:
        backends = backend_set({"m": {"backends": list(adapters)}}, adapters)  # type: ignore[arg-type]
    metrics = GatewayMetrics()
    protection = Protection(parse_config({}), CollectorRegistry())
    await protection.start()
    failures: list[tuple[str, str | None]] = []
    intent = Intent([route_request("rid", "m", prompt="hello")], CALL, 2)
    ticket = await protection.admit(await protection.authenticate({}), "m", intent.requests[0], 2, _never_gone)
    releases: list[tuple[Usage | None, CancelPhase | None]] = []
    count_releases(ticket, releases)
    pool = backends.pools["m"]
    order = capable_order(pool, "embeddings", "embeddings", intent.requests[0])
    if reload_drops_model:
        backends.pools.pop("m")  # a reload between admission and the call
    ctx = RequestContext("rid", time.perf_counter(), operation="embeddings", model="m")
    call: OneShotCall[EmbeddingResult] = OneShotCall(
        RequestRecorder(metrics, backends.pools, None),
        Admitted(ctx, ticket, intent, pool, order),
        lambda adapter: adapter.embed(CALL),
        lambda result: ({"n": len(result.vectors)}, Usage(result.prompt_tokens or 0, 0)),
        lambda name, err: failures.append((name, err.code)),
    )
    sent: list[dict] = []

    async def receive() -> dict:
        if leave_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(leave_after)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await call({"type": "http"}, receive, send)
    await protection.aclose()
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return {
        "status": start["status"] if start else None,
        "body": orjson.loads(body) if body else None,
        "releases": releases,
        "failures": failures,
        "inflight": {name: b.inflight for name, b in backends.backends.items()},
        "ejection": {
            name: {"failures": {k.value: n for k, n in pool.ejection.failures(name).items() if n}} for name in adapters
        },
        "requests": sample_value(
            metrics.registry,
            "switchyard_requests_total",
            {"model": "m", "backend": call.backend or "-", "status": str(start["status"] if start else 499)},
        ),
    }


async def _never_gone() -> bool:
    return False


async def test_only_capable_backends_are_tried_and_a_retryable_failure_fails_over():
    down = GatewayError(
        503, "The backend serving this model is unavailable.", code="backend_unavailable", failure=FailureKind.CONNECT
    )
    adapters = {
        "chat-only": EmbedAdapter("chat-only", RESULT, embeddings=False),
        "a": EmbedAdapter("a", down),
        "b": EmbedAdapter("b", RESULT),
    }
    out = await run_call(adapters)
    assert out["status"] == 200 and out["body"] == {"n": 1}
    assert adapters["chat-only"].calls == 0 and adapters["a"].calls == 1 and adapters["b"].calls == 1
    assert out["failures"] == [("a", "backend_unavailable")]
    assert out["releases"] == [(Usage(4, 0), None)]
    assert out["inflight"] == {"chat-only": 0, "a": 0, "b": 0}
    assert out["requests"] == 1.0


async def test_a_failure_that_is_not_retryable_is_the_answer():
    refused = GatewayError(400, "dimensions unsupported", param="dimensions")
    adapters = {"a": EmbedAdapter("a", refused), "b": EmbedAdapter("b", RESULT)}
    out = await run_call(adapters)
    assert out["status"] == 400 and out["body"]["error"]["param"] == "dimensions"
    assert adapters["b"].calls == 0
    assert out["releases"] == [(None, None)]  # no usage: the reservation is what is charged
    assert out["inflight"] == {"a": 0, "b": 0}


async def test_a_client_leaving_cancels_the_call_and_releases_for_its_phase():
    adapters = {"a": EmbedAdapter("a", HANG)}
    out = await run_call(adapters, leave_after=0.05)
    assert out["status"] is None  # nothing was sent
    assert adapters["a"].cancelled
    assert out["releases"] == [(None, CancelPhase.NON_STREAMING)]
    assert out["inflight"] == {"a": 0}
    assert out["requests"] == 1.0  # counted as 499 on the backend at work


def test_no_capable_backend_is_a_400_naming_the_model_and_its_runtime():
    adapters = {"secret-box-1": EmbedAdapter("secret-box-1", RESULT, embeddings=False)}
    backends = backend_set({"m": {"backends": list(adapters)}}, adapters)  # type: ignore[arg-type]
    with pytest.raises(GatewayError) as info:
        capable_order(backends.pools["m"], "embeddings", "embeddings", route_request("r", "m", prompt="x"))
    err = info.value
    assert (err.status, err.param, err.code) == (400, "model", "unsupported_by_runtime")
    assert "`m`" in err.message and "secret-box-1" not in err.message


def server_error() -> GatewayError:
    return GatewayError(500, "The runtime failed: boom", code="upstream_error")


async def test_a_runtime_500_fails_over_and_counts_against_the_backend():
    adapters = {"a": EmbedAdapter("a", server_error()), "b": EmbedAdapter("b", RESULT)}
    out = await run_call(adapters)
    assert out["status"] == 200 and adapters["a"].calls == 1 and adapters["b"].calls == 1
    assert out["ejection"]["a"]["failures"] == {"server_error": 1}
    assert out["ejection"]["b"]["failures"] == {}


async def test_a_backend_failing_every_call_is_ejected_and_then_skipped():
    # consecutive_failures defaults to 5: after its fifth failed call `a` is ejected,
    # and the calls after that go to `b` alone (whatever the routing order).
    adapters = {"a": EmbedAdapter("a", server_error()), "b": EmbedAdapter("b", RESULT)}
    backends = backend_set({"m": {"backends": ["a", "b"]}}, adapters)  # type: ignore[arg-type]
    ejection = backends.pools["m"].ejection
    for _ in range(40):
        assert (await run_call(adapters, backends=backends))["status"] == 200
        assert ejection.is_ejected("a") == (adapters["a"].calls >= 5)
        if adapters["a"].calls >= 5:
            break
    assert adapters["a"].calls == 5
    for _ in range(3):
        assert (await run_call(adapters, backends=backends))["status"] == 200
    assert adapters["a"].calls == 5


async def test_a_clients_mistake_is_no_failure_of_the_backend():
    refused = GatewayError(400, "dimensions unsupported", param="dimensions")
    adapters = {"a": EmbedAdapter("a", refused)}
    out = await run_call(adapters)
    assert out["status"] == 400 and out["ejection"]["a"]["failures"] == {}


async def test_a_call_whose_model_a_reload_dropped_still_fails_over_and_answers():
    adapters = {"a": EmbedAdapter("a", server_error()), "b": EmbedAdapter("b", RESULT)}
    out = await run_call(adapters, reload_drops_model=True)
    assert out["status"] == 200 and adapters["a"].calls == 1 and adapters["b"].calls == 1
    assert out["ejection"]["a"]["failures"] == {"server_error": 1}  # the pool it was admitted to still counts
