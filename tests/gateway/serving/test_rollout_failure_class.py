"""A rollout's failure class is the kind the error carries (`GatewayError.failure`,
adapters/errors.py the one place a status decides a kind): the recorded request and the
mirror copy are classed by it, never by their status again. Errors whose status and
kind disagree show which one decided."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from adapters.base import ErrorEvent, Finish, GenerationRequest, TextDelta
from adapters.errors import (
    FailureKind,
    GatewayError,
    deadline_exceeded,
    internal_error,
    model_not_found,
    no_backend,
    upstream_busy,
    upstream_failed,
    upstream_timeout,
    upstream_unavailable,
)
from adapters.runtime_errors import mid_stream_failure
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config
from gateway.observe.context import RequestContext
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.recorder import RequestRecorder
from gateway.protection.gate import Protection
from gateway.serving.dispatch import Dispatcher
from gateway.serving.generation import Generation
from gateway.serving.mirror import candidate_answer
from gateway.serving.rollout import failure_class
from tests.gateway.scripted import ScriptedAdapter, always
from tests.gateway.serving.rollout_kit import Controller
from tests.procs import sample_value

# What the analysis counted by status before the kind decided it; each builder's kind agrees.
BUILT = [
    (deadline_exceeded(), "timeout"),
    (upstream_timeout("b", "idle", 1.0, first_byte=False), "timeout"),
    (upstream_timeout("b", "slow", 1.0, first_byte=True), "timeout"),
    (no_backend("m"), "overload"),
    (upstream_unavailable("b", "refused"), "overload"),
    (upstream_busy("b", "pool", 1.0), "overload"),
    (upstream_failed("b", "cut"), "server_error"),
    (internal_error(), "server_error"),
    (mid_stream_failure(GatewayError(400, "engine"), "b"), "server_error"),
    (GatewayError(400, "bad"), ""),
    (model_not_found("m"), ""),
]


@pytest.mark.parametrize(("error", "kind"), BUILT, ids=[f"{e.status}-{e.code}" for e, _ in BUILT])
def test_each_errors_class_is_its_kinds(error: GatewayError, kind: str) -> None:
    assert failure_class(error.failure) == kind


def rolled_out(adapter: ScriptedAdapter, controller: Controller) -> tuple[BackendSet, Dispatcher]:
    """Model `m` under rollout on one stable backend `s`, served by `adapter`."""
    backend = {"name": "s", "adapter": "openai", "url": "http://127.0.0.1:9/v1", "track": "stable"}
    candidate = {**backend, "name": "c", "track": "candidate"}
    model = {"backends": [backend, candidate], "max_retries": 0, "rollout": {"steps": [0.5, 1.0]}}
    backends = BackendSet(parse_config({"models": {"m": model}}))
    backends.backends["s"].adapter = adapter
    return backends, Dispatcher(backends, rollouts=controller)


def chat() -> GenerationRequest:
    return GenerationRequest("rid-1", "m", messages=[{"role": "user", "content": "hi"}], stream=True)


async def record_of(*script: object) -> str | None:
    """The failure class of the `TrackRecord` a generation on `script` hands the sink
    ("" when it hands none: not the track's failure)."""
    controller = Controller(candidate=0.0)  # every request is stable's
    backends, dispatcher = rolled_out(ScriptedAdapter("s", always(*script)), controller)
    protection = Protection(parse_config({}), CollectorRegistry())
    await protection.start()
    try:
        ticket = await protection.admit(await protection.authenticate({}), "m", chat(), 10, never_gone)
        recorder = RequestRecorder(GatewayMetrics(), backends.pools, None, rollouts=controller)
        ctx = RequestContext("rid-1", time.perf_counter(), operation="chat", model="m")
        generation = Generation(dispatcher, recorder, ctx, ticket, [chat()])
        await generation({"type": "http"}, stay, discard)
    finally:
        await protection.aclose()
    assert len(controller.records) <= 1
    return controller.records[0][1].failure if controller.records else ""


async def never_gone() -> bool:
    return False


async def stay() -> dict:
    await asyncio.Event().wait()
    return {"type": "http.disconnect"}


async def discard(message: dict) -> None:
    pass


async def test_a_request_is_recorded_by_its_errors_kind_not_its_status():
    # 503 said "overload" by status; its kind says timeout.
    assert await record_of(GatewayError(503, "slow", failure=FailureKind.TIMEOUT)) == "timeout"
    # Mid-stream: 502 said "server_error"; its kind says overload.
    overload = GatewayError(502, "busy", failure=FailureKind.OVERLOAD)
    assert await record_of(TextDelta(0, "Hi"), ErrorEvent(overload)) == "overload"
    # A 429 without a kind is no backend's failure: not recorded as overload.
    assert await record_of(GatewayError(429, "yours")) == ""


async def test_a_mirror_copys_failure_is_classed_by_its_kind_not_its_status():
    failing = ScriptedAdapter("s", always(GatewayError(503, "slow", failure=FailureKind.TIMEOUT)))
    backends, _ = rolled_out(failing, Controller())
    answer = await candidate_answer(backends.backends["s"], chat())
    assert answer.failure == "timeout"
    refused = ScriptedAdapter("s", always(GatewayError(429, "yours")))
    backends, _ = rolled_out(refused, Controller())
    assert (await candidate_answer(backends.backends["s"], chat())).failure == "rejected"


async def test_the_latency_histograms_carry_the_track_that_answered():
    controller = Controller(candidate=0.0)  # every request is stable's
    script = always(TextDelta(0, "a"), TextDelta(0, "b"), TextDelta(0, "c"), Finish(0, "stop"))
    backends, dispatcher = rolled_out(ScriptedAdapter("s", script), controller)
    protection = Protection(parse_config({}), CollectorRegistry())
    await protection.start()
    metrics = GatewayMetrics()
    try:
        ticket = await protection.admit(await protection.authenticate({}), "m", chat(), 10, never_gone)
        recorder = RequestRecorder(metrics, backends.pools, None, rollouts=controller)
        ctx = RequestContext("rid-1", time.perf_counter(), operation="chat", model="m")
        await Generation(dispatcher, recorder, ctx, ticket, [chat()])({"type": "http"}, stay, discard)
    finally:
        await protection.aclose()
    ttft = {"model": "m", "backend": "s", "track": "stable"}
    assert sample_value(metrics.registry, "switchyard_time_to_first_token_seconds_count", ttft) == 1
    itl = {"model": "m", "track": "stable"}
    assert sample_value(metrics.registry, "switchyard_inter_token_latency_seconds_count", itl) == 2
