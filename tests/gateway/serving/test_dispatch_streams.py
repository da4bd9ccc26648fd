"""What the dispatcher hands back, in process on scripted adapters: a lone stream
read only as the client reads (no read-ahead layer: the runtime feels the
client's pace), dense choice indices over any number of prompts, the names of
the backends that serve, an unknown model, a runtime without `n` asked for one
choice, the backend's name in the logs (never to the client), and the spans of
a traced request: its routing step and one span per attempt, failed or not."""

from __future__ import annotations

import asyncio
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adapters.base import ErrorEvent, Finish, GenerationRequest, SamplingParams, TextDelta, Usage
from adapters.errors import FailureKind, GatewayError, model_not_found
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.otel_trace import OtelTracing
from gateway.serving.dispatch import Dispatcher
from tests.gateway.scripted import ScriptedAdapter, always, backend_set


def chat(n: int = 1, request_id: str = "req") -> GenerationRequest:
    return GenerationRequest(
        request_id=request_id,
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        sampling=SamplingParams(n=n),
        stream=True,
    )


def completion(prompts: list[str], n: int = 1) -> list[GenerationRequest]:
    return [
        GenerationRequest(f"req-{i}", "m", kind="completion", prompt=p, sampling=SamplingParams(n=n), stream=True)
        for i, p in enumerate(prompts)
    ]


def answer(text: str = "ok") -> list:
    return [TextDelta(0, text), Finish(0, "stop"), Usage(5, 1)]


def one_backend(adapter: ScriptedAdapter, **model) -> Dispatcher:
    return Dispatcher(backend_set({"m": {"backends": ["b1"], **model}}, {"b1": adapter}))


async def read(dispatched) -> list:
    events = [e async for e in dispatched.events]
    await dispatched.aclose()
    return events


# ---- one stream, many streams --------------------------------------------------------------------


async def test_a_lone_request_is_read_from_the_runtime_only_as_the_client_reads():
    # Native n: one upstream stream. Nothing reads it ahead of the client, so a slow
    # client slows the runtime's stream instead of piling its events up in the gateway.
    read_on = asyncio.Event()

    async def second_event_asked():
        read_on.set()

    b1 = ScriptedAdapter("b1", always(TextDelta(0, "a"), second_event_asked, TextDelta(1, "b"), Finish(0, "stop")))
    dispatcher = one_backend(b1)
    dispatched = await dispatcher.open("m", [chat(n=2)])
    for _ in range(20):
        await asyncio.sleep(0)
    assert not read_on.is_set()  # only the first event was read, to know the stream started
    # (bounded: a stream that never comes must fail the test, not hang it)
    assert await asyncio.wait_for(anext(dispatched.events), 5) == TextDelta(0, "a")
    assert await asyncio.wait_for(anext(dispatched.events), 5) == TextDelta(1, "b") and read_on.is_set()
    await dispatched.aclose()
    assert dispatcher.backends.backends["b1"].inflight == 0


async def test_three_prompts_with_two_choices_each_get_indices_zero_to_five():
    b1 = ScriptedAdapter("b1", lambda r: [TextDelta(0, r.prompt + "0"), TextDelta(1, r.prompt + "1"), Usage(1, 2)])
    events = await read(await one_backend(b1).open("m", completion(["a", "b", "c"], n=2)))
    texts = {e.index: e.text for e in events if isinstance(e, TextDelta)}
    assert texts == {0: "a0", 1: "a1", 2: "b0", 3: "b1", 4: "c0", 5: "c1"}


async def test_sub_requests_served_apart_name_every_backend_in_order():
    b1, b2 = ScriptedAdapter("b1", lambda r: answer()), ScriptedAdapter("b2", lambda r: answer())
    model = {"backends": ["b1", "b2"], "routing": "round_robin"}
    dispatched = await Dispatcher(backend_set({"m": model}, {"b1": b1, "b2": b2})).open("m", completion(["x", "y"]))
    await read(dispatched)
    assert dispatched.backends == ("b1", "b2") and len(b1.requests) == len(b2.requests) == 1


async def test_a_fan_out_names_its_one_backend():
    b1 = ScriptedAdapter("b1", lambda r: answer(r.request_id), n=False)
    dispatched = await one_backend(b1).open("m", [chat(n=3)])
    events = await read(dispatched)
    assert dispatched.backends == ("b1",) and len([e for e in events if isinstance(e, Finish)]) == 3


async def test_one_choice_on_a_runtime_without_n_is_one_request_under_the_requests_own_id():
    b1 = ScriptedAdapter("b1", lambda r: answer(), n=False)
    await read(await one_backend(b1).open("m", [chat(request_id="abc")]))
    assert [r.request_id for r in b1.requests] == ["abc"]


async def test_an_unknown_model_is_a_404_naming_it():
    with pytest.raises(GatewayError) as info:
        await one_backend(ScriptedAdapter("b1", lambda r: answer())).open("llama-9", [chat()])
    err = info.value
    assert (err.status, err.param, err.code) == (404, "model", "model_not_found")
    assert err.message == model_not_found("llama-9").message  # one wording, the front door's


# ---- the backend's name: in the log, never to the client ------------------------------------------


async def test_a_stream_that_ends_before_any_event_is_a_502_and_the_log_names_the_backend(caplog):
    caplog.set_level(logging.WARNING)
    with pytest.raises(GatewayError) as info:
        await one_backend(ScriptedAdapter("b1", always())).open("m", [chat()])
    err = info.value
    assert err.message == "The backend serving this model failed: it ended its answer before sending anything"
    assert "b1" not in err.message
    assert "backend b1 failed: it ended its answer before sending anything" in caplog.text


async def test_a_mid_stream_failure_is_logged_with_the_backends_name(caplog):
    caplog.set_level(logging.WARNING)
    b1 = ScriptedAdapter("b1", always(TextDelta(0, "par"), GatewayError(503, "engine died", code="x")))
    events = await read(await one_backend(b1).open("m", [chat()]))
    assert isinstance(events[-1], ErrorEvent) and "b1" not in events[-1].error.message
    assert "backend b1 failed mid-stream: engine died" in caplog.text


# ---- traced: the routing step and every attempt ------------------------------------------------------


CHAT_SCOPE = {"headers": [], "method": "POST", "path": "/v1/chat/completions", "scheme": "http"}


async def test_a_traced_request_has_a_routing_step_and_a_span_per_attempt_each_ended():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace = OtelTracing(provider).request(CHAT_SCOPE, "chat")  # this task's trace from now on
    raised = ScriptedAdapter(
        "b1", always(GatewayError(503, "down", code="backend_unavailable", failure=FailureKind.CONNECT))
    )
    said = ScriptedAdapter(
        "b2", always(ErrorEvent(GatewayError(429, "busy", code="backend_busy", failure=FailureKind.OVERLOAD)))
    )
    served = ScriptedAdapter("b3", lambda r: answer())
    model = {"backends": ["b1", "b2", "b3"], "routing": "least_loaded", "max_retries": 0}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": raised, "b2": said, "b3": served}))
    dispatched = await dispatcher.open("m", [chat(request_id="abc")])
    await read(dispatched)
    # the attempt that served ends with its request, which gives it the response's attributes
    assert len(exporter.get_finished_spans()) == 3  # the route step and the two failed attempts
    trace.finish(RequestContext("r", 0.0, "chat", model="m"), Outcome(200, Usage(3, 2), "b3"))
    spans = exporter.get_finished_spans()
    (route,) = [s for s in spans if s.name == "switchyard.route"]
    assert route.attributes["switchyard.route.candidates"] == 3
    attempts = {
        s.attributes["switchyard.backend"]: s for s in spans if s.name == "chat m" and s.kind == SpanKind.CLIENT
    }
    assert sorted(attempts) == ["b1", "b2", "b3"]  # the one that served ended too, at the request's end
    assert attempts["b3"].attributes["gen_ai.usage.output_tokens"] == 2
    assert "gen_ai.usage.output_tokens" not in attempts["b1"].attributes
    assert attempts["b1"].status.status_code is StatusCode.ERROR and attempts["b1"].status.description == "down"
    assert attempts["b2"].status.status_code is StatusCode.ERROR and attempts["b2"].status.description == "busy"
    assert attempts["b3"].status.status_code is StatusCode.UNSET
    assert [attempts[b].attributes["switchyard.upstream_request_id"] for b in ("b1", "b2", "b3")] == [
        "abc",
        "abc.1",
        "abc.2",
    ]
