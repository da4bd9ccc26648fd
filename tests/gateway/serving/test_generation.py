"""Generation driven as an ASGI app in process, with hand-made `receive`/`send`, a
scripted adapter and a real Protection: what is sent, and that the ticket is
released exactly once, with the phase the client left in. (The queued phase
happens before a Generation exists: tests/gateway/protection/test_protection.py.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from adapters.base import ErrorEvent, Finish, GenerationRequest, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.errors import FailureKind, GatewayError
from gateway.config.schema import parse_config
from gateway.observe.context import RequestContext
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.recorder import RequestRecorder
from gateway.openai.answer_format import AnswerFormat
from gateway.protection.gate import Protection
from gateway.serving.dispatch import Dispatcher
from gateway.serving.generation import Generation
from gateway.serving.phases import CancelPhase
from tests.gateway.scripted import HANG, Pause, ScriptedAdapter, always, backend_set, count_releases
from tests.procs import sample_value


def chat(stream: bool = True, **kw: Any) -> GenerationRequest:
    return GenerationRequest(
        request_id="rid-1",
        model="m",
        messages=[{"role": "user", "content": "hello there"}],
        stream=stream,
        sampling=kw.pop("sampling", SamplingParams()),
        **kw,
    )


async def never_gone() -> bool:
    return False


@dataclass
class Run:
    sent: list[dict] = field(default_factory=list)
    releases: list[tuple[Usage | None, CancelPhase | None]] = field(default_factory=list)
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    protection: Protection | None = None
    inflight: int = -1
    body_seen: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def status(self) -> int:
        return next(m["status"] for m in self.sent if m["type"] == "http.response.start")

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    @property
    def writes(self) -> list[bytes]:
        """The non-empty body writes, in order."""
        return [m["body"] for m in self.sent if m["type"] == "http.response.body" and m.get("body")]

    def metric(self, name: str, **labels: str) -> float:
        return sample_value(self.metrics.registry, name, labels)


async def generate(
    adapter: ScriptedAdapter,
    request: GenerationRequest,
    *,
    leave: Callable[[Run], Awaitable[None]] | None = None,
    model: dict | None = None,
    answer: AnswerFormat | None = None,
) -> Run:
    """Run one Generation to its end (chat's answer format unless `answer` is given).
    `leave` returns when the client should go away."""
    run = Run()
    backends = backend_set({"m": model or {"backends": ["b1"]}}, {"b1": adapter})
    protection = Protection(parse_config({}), CollectorRegistry())
    await protection.start()
    run.protection = protection
    ticket = await protection.admit(await protection.authenticate({}), "m", request, 10, never_gone)
    count_releases(ticket, run.releases)

    async def send(message: dict) -> None:
        run.sent.append(dict(message))  # the generation reuses its body message
        if message["type"] == "http.response.body" and message.get("body"):
            run.body_seen.set()

    async def receive() -> dict:
        if leave is None:
            await asyncio.Event().wait()  # the client stays
        else:
            await leave(run)
        return {"type": "http.disconnect"}

    recorder = RequestRecorder(run.metrics, backends.pools, None)
    ctx = RequestContext("rid-1", time.perf_counter(), operation=request.kind, model="m")
    generation = Generation(Dispatcher(backends), recorder, ctx, ticket, [request], answer)
    await generation({"type": "http"}, receive, send)
    run.inflight = backends.backends["b1"].inflight
    await protection.aclose()
    return run


def sse_data(body: bytes) -> list:
    out = []
    for block in body.split(b"\n\n"):
        if block:
            data = block.removeprefix(b"data: ")
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out


# ---- answers ---------------------------------------------------------------------------------


async def test_a_stream_is_sent_and_the_ticket_released_once_with_the_real_usage():
    adapter = ScriptedAdapter("b1", always(TextDelta(0, "Hi"), Finish(0, "stop"), Usage(5, 1)))
    run = await generate(adapter, chat(include_usage=True))
    frames = sse_data(run.body)
    assert run.status == 200 and frames[-1] == "[DONE]"
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Hi"}
    assert frames[-2]["usage"]["total_tokens"] == 6
    assert run.releases == [(Usage(5, 1), None)]
    assert run.metric("switchyard_requests_total", model="m", backend="b1", status="200") == 1
    assert run.inflight == 0 and adapter.ended == 1


async def test_a_whole_answer_is_one_json_body():
    adapter = ScriptedAdapter("b1", always(ToolCallDelta(0, 0, "0", "f", "{}"), Finish(0, "stop"), Usage(5, 2)))
    run = await generate(adapter, chat(stream=False, tools=[{"type": "function", "function": {"name": "f"}}]))
    body = orjson.loads(run.body)
    assert run.status == 200 and body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["choices"][0]["message"]["tool_calls"][0]["id"].startswith("call_")
    assert run.releases == [(Usage(5, 2), None)]


async def test_an_error_before_the_first_event_is_an_error_response():
    adapter = ScriptedAdapter("b1", always(GatewayError(400, "bad", param="messages")))
    run = await generate(adapter, chat())
    assert run.status == 400 and orjson.loads(run.body)["error"]["param"] == "messages"
    assert run.releases == [(None, None)]
    assert run.metric("switchyard_requests_total", model="m", backend="-", status="400") == 1


async def test_an_error_mid_stream_is_an_error_event_then_done_and_counted_as_such():
    adapter = ScriptedAdapter("b1", always(TextDelta(0, "Hi"), ErrorEvent(GatewayError(502, "cut"))))
    run = await generate(adapter, chat())
    frames = sse_data(run.body)
    assert frames[-2]["error"]["message"] == "cut" and frames[-1] == "[DONE]"
    assert run.metric("switchyard_requests_total", model="m", backend="b1", status="502") == 1
    usage, phase = run.releases[0]
    assert len(run.releases) == 1 and phase is None and usage.completion_tokens == 1  # what was seen


async def test_a_whole_answer_that_breaks_off_is_an_error_response():
    adapter = ScriptedAdapter("b1", always(TextDelta(0, "Hi")))  # never finished
    run = await generate(adapter, chat(stream=False))
    assert run.status == 502 and orjson.loads(run.body)["error"]["code"] == "upstream_error"
    assert len(run.releases) == 1


# ---- the client leaving, in each phase ------------------------------------------------------------


async def once_called(adapter: ScriptedAdapter):
    async def leave(run: Run) -> None:
        await adapter.called.wait()

    return leave


async def test_leaving_while_waiting_for_the_first_event():
    adapter = ScriptedAdapter("b1", always(HANG))
    run = await generate(adapter, chat(), leave=await once_called(adapter))
    assert run.releases == [(None, CancelPhase.UPSTREAM_HEADERS)]
    assert run.metric("switchyard_client_cancellations_total", phase="upstream_headers") == 1
    assert run.metric("switchyard_requests_total", model="m", backend="-", status="499") == 1
    assert run.inflight == 0 and adapter.ended == 1


async def test_leaving_mid_stream():
    adapter = ScriptedAdapter("b1", always(TextDelta(0, "Hi"), HANG))

    async def after_the_first_chunk(run: Run) -> None:
        await run.body_seen.wait()

    run = await generate(adapter, chat(), leave=after_the_first_chunk)
    [(usage, phase)] = run.releases
    assert phase == CancelPhase.MID_STREAM and usage.completion_tokens == 1  # what was seen
    assert run.metric("switchyard_client_cancellations_total", phase="mid_stream") == 1
    assert run.inflight == 0 and adapter.ended == 1


async def test_leaving_a_whole_answer():
    adapter = ScriptedAdapter("b1", always(TextDelta(0, "Hi"), HANG))
    run = await generate(adapter, chat(stream=False), leave=await once_called(adapter))
    assert [phase for _, phase in run.releases] == [CancelPhase.NON_STREAMING]
    assert run.metric("switchyard_client_cancellations_total", phase="non_streaming") == 1
    assert not any(m["type"] == "http.response.start" for m in run.sent)  # nothing was sent
    assert run.inflight == 0 and adapter.ended == 1


async def test_leaving_during_the_retry_backoff():
    adapter = ScriptedAdapter("b1", always(GatewayError(503, "down", failure=FailureKind.CONNECT)))

    async def in_the_backoff(run: Run) -> None:
        await adapter.called.wait()
        await asyncio.sleep(0.01)

    model = {"backends": ["b1"], "max_retries": 1, "retry_backoff_s": 30}
    run = await generate(adapter, chat(), leave=in_the_backoff, model=model)
    assert run.releases == [(None, CancelPhase.RETRY_BACKOFF)]
    assert run.metric("switchyard_client_cancellations_total", phase="retry_backoff") == 1
    assert len(adapter.requests) == 1 and run.inflight == 0


@pytest.mark.parametrize("phase", list(CancelPhase))
def test_phase_names_are_the_metric_labels(phase):
    assert str(phase) == phase.value and phase.value in {
        "queued",
        "upstream_headers",
        "retry_backoff",
        "mid_stream",
        "non_streaming",
    }


# ---- the gateway's own cost -----------------------------------------------------------------

UPSTREAM_DELAY_S = 0.3


def overhead_and_duration(run: Run) -> tuple[float, float]:
    """The one request's `switchyard_gateway_overhead_seconds` and end-to-end duration."""
    assert run.metric("switchyard_gateway_overhead_seconds_count", model="m") == 1
    return (
        run.metric("switchyard_gateway_overhead_seconds_sum", model="m"),
        run.metric("switchyard_request_duration_seconds_sum", model="m"),
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_overhead_leaves_out_the_upstream_wait_before_and_between_events(stream):
    slow = Pause(UPSTREAM_DELAY_S)
    adapter = ScriptedAdapter("b1", always(slow, TextDelta(0, "Hi"), slow, Finish(0, "stop"), Usage(5, 1)))
    run = await generate(adapter, chat(stream=stream))
    overhead, duration = overhead_and_duration(run)
    assert run.status == 200 and duration >= 2 * UPSTREAM_DELAY_S
    assert overhead < UPSTREAM_DELAY_S / 3, overhead


async def test_overhead_leaves_out_the_retry_backoff():
    calls = []

    def down_once(request: GenerationRequest) -> list:
        calls.append(request)
        if len(calls) == 1:
            return [GatewayError(503, "down", failure=FailureKind.CONNECT)]
        return [TextDelta(0, "Hi"), Finish(0, "stop"), Usage(5, 1)]

    model = {"backends": ["b1"], "max_retries": 1, "retry_backoff_s": UPSTREAM_DELAY_S}
    run = await generate(ScriptedAdapter("b1", down_once), chat(), model=model)
    overhead, duration = overhead_and_duration(run)
    assert run.status == 200 and len(calls) == 2 and duration >= UPSTREAM_DELAY_S
    assert overhead < UPSTREAM_DELAY_S / 3, overhead
