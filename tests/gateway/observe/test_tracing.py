"""Request traces, in process: a real gateway (uvicorn on this loop) with its spans
exported to the SDK's in-memory exporter, in front of runtime simulators that
record the headers they receive. One trace per request, its phases as children,
GenAI attributes, the attempt's traceparent at the runtime (SGLang's abort call
included), a client's trace continued, and nothing sent when tracing is off."""

from __future__ import annotations

import asyncio
import re

import httpx
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode

from gateway.observe.otel_trace import OtelTracing
from gateway.observe.tracing import NoTracing
from policies.auth import hash_key
from simulators.testing import start_in_process
from tests.gateway.live_gateway import serving

CLIENT_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CLIENT_SPAN = 0x00F067AA0BA902B7
CLIENT_TRACEPARENT = f"00-{CLIENT_TRACE:032x}-{CLIENT_SPAN:016x}-01"
MSG = [{"role": "user", "content": "hi"}]
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


@pytest.fixture(scope="module")
def vllm():
    with start_in_process("vllm", health_latency=0.0) as sim:
        yield sim


@pytest.fixture(scope="module")
def failing_vllm():
    with start_in_process("vllm", health_latency=0.0, fault="status=503") as sim:
        yield sim


@pytest.fixture(scope="module")
def sglang():
    with start_in_process("sglang", health_latency=0.0) as sim:
        yield sim


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def tracing_to(exporter: InMemorySpanExporter, sampler: Sampler | None = None) -> OtelTracing:
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelTracing(provider)


def backend(name: str, adapter: str, sim) -> dict:
    return {"name": name, "adapter": adapter, "url": sim.url, "served_model": "sim-model"}


def config(*backends: dict, **extra) -> dict:
    return {"access_log": False, "models": {"m": {"backends": list(backends)}}, **extra}


async def request_spans(exporter: InMemorySpanExporter, count: int = 1) -> list[ReadableSpan]:
    """The finished spans once `count` request (SERVER) spans have ended: a request's
    span ends after its answer was sent."""
    async with asyncio.timeout(10):
        while sum(s.kind == SpanKind.SERVER for s in exporter.get_finished_spans()) < count:
            await asyncio.sleep(0.01)
    return list(exporter.get_finished_spans())


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def generation_headers(sim) -> list[dict[str, str]]:
    return [r["headers"] for r in sim.stats()["last_requests"] if r["path"].endswith("/completions")]


def sent_traceparent(span: ReadableSpan) -> str:
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


async def test_one_request_is_one_trace_with_a_span_per_phase_and_genai_attributes(vllm, exporter):
    vllm.reset()
    cfg = config(
        backend("v1", "vllm", vllm),
        auth={"mode": "keys", "api_keys": [{"sha256": hash_key("sk-acme"), "tenant": "acme"}]},
        tenants={"acme": {"requests_per_minute": 100}},
    )
    async with serving(cfg, tracing_to(exporter)) as served:
        client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="sk-acme", max_retries=0)
        answer = await client.chat.completions.create(model="m", messages=MSG, max_tokens=5, temperature=0.5)
        spans = by_name(await request_spans(exporter))

    assert set(spans) == {
        "chat m",
        "switchyard.authenticate",
        "switchyard.quota",
        "switchyard.queue",
        "switchyard.route",
        "chat sim-model",
    }
    root, attempt = spans["chat m"], spans["chat sim-model"]
    assert root.kind == SpanKind.SERVER and root.parent is None
    assert attempt.kind == SpanKind.CLIENT
    for span in spans.values():
        assert span.context.trace_id == root.context.trace_id
        if span is not root:
            assert span.parent.span_id == root.context.span_id, span.name
            assert span.start_time >= root.start_time and span.end_time <= root.end_time, span.name
    assert spans["switchyard.route"].attributes["switchyard.route.candidates"] == 1

    attrs = root.attributes
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "m"
    assert attrs["gen_ai.request.max_tokens"] == 5
    assert attrs["gen_ai.request.temperature"] == 0.5
    assert attrs["gen_ai.response.model"] == "sim-model"  # the served model, not the alias
    assert attrs["gen_ai.response.id"] == answer.id
    assert attrs["gen_ai.usage.input_tokens"] == answer.usage.prompt_tokens
    assert attrs["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens
    assert list(attrs["gen_ai.response.finish_reasons"]) == [answer.choices[0].finish_reason]
    assert attrs["switchyard.tenant"] == "acme"
    assert attrs["switchyard.backend"] == "v1"
    assert attrs["http.response.status_code"] == 200
    assert "error.type" not in attrs and root.status.status_code == StatusCode.UNSET

    assert attempt.attributes["gen_ai.provider.name"] == "vllm"
    assert attempt.attributes["gen_ai.request.model"] == "sim-model"
    assert attempt.attributes["server.address"] == "127.0.0.1"
    assert attempt.attributes["server.port"] == vllm.port
    assert attempt.attributes["switchyard.backend"] == "v1"
    assert attempt.attributes["switchyard.runtime"] == "vLLM"
    # The runtime received the attempt's own context: same trace, the attempt as parent.
    (headers,) = generation_headers(vllm)
    assert headers["traceparent"] == sent_traceparent(attempt)


async def test_a_stream_has_a_first_token_event_and_a_clients_trace_is_continued(vllm, exporter):
    vllm.reset()
    async with serving(config(backend("v1", "vllm", vllm)), tracing_to(exporter)) as served:
        client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
        stream = await client.chat.completions.create(
            model="m",
            messages=MSG,
            max_tokens=4,
            stream=True,
            extra_headers={"traceparent": CLIENT_TRACEPARENT},
        )
        chunks = [chunk async for chunk in stream]
        spans = by_name(await request_spans(exporter))

    root, attempt = spans["chat m"], spans["chat sim-model"]
    assert root.context.trace_id == CLIENT_TRACE
    assert root.parent.span_id == CLIENT_SPAN and root.parent.is_remote
    (event,) = [e for e in root.events if e.name == "switchyard.first_token"]
    assert (
        0 < event.attributes["switchyard.time_to_first_token_s"] == root.attributes["switchyard.time_to_first_token_s"]
    )
    assert root.attributes["switchyard.stream"] is True
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert list(root.attributes["gen_ai.response.finish_reasons"]) == finish
    (headers,) = generation_headers(vllm)
    trace_id, parent_id = TRACEPARENT.fullmatch(headers["traceparent"]).groups()
    assert int(trace_id, 16) == CLIENT_TRACE and int(parent_id, 16) == attempt.context.span_id


async def test_a_failed_attempt_is_an_error_span_beside_the_one_that_served(vllm, failing_vllm, exporter):
    vllm.reset()
    failing_vllm.reset()
    cfg = config(backend("bad", "vllm", failing_vllm), backend("good", "vllm", vllm))
    async with serving(cfg, tracing_to(exporter)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            body = {"model": "m", "messages": MSG, "max_tokens": 2}
            # Round robin: one of the two requests tries the failing backend first.
            for _ in range(2):
                assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        spans = await request_spans(exporter, 2)

    attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
    (failed,) = [s for s in attempts if s.attributes["switchyard.backend"] == "bad"]
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["error.type"] == "backend_unavailable"
    (served_by_good,) = [
        s
        for s in attempts
        if s.attributes["switchyard.backend"] == "good" and s.parent.span_id == failed.parent.span_id
    ]
    assert served_by_good.status.status_code == StatusCode.UNSET
    (root,) = [s for s in spans if s.context.span_id == failed.parent.span_id]
    assert root.attributes["http.response.status_code"] == 200 and root.attributes["switchyard.backend"] == "good"
    # Each attempt named itself to its runtime: the retry is not the failed attempt's child.
    (bad_headers,) = generation_headers(failing_vllm)
    assert bad_headers["traceparent"] == sent_traceparent(failed)
    assert sent_traceparent(served_by_good) in [h["traceparent"] for h in generation_headers(vllm)]


async def test_sglangs_abort_call_carries_the_attempts_traceparent(sglang, exporter):
    sglang.reset()
    async with serving(config(backend("s1", "sglang", sglang)), tracing_to(exporter)) as served:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi [[sim:output_tokens=400,itl_ms=20]]"}],
            "max_tokens": 400,
            "stream": True,
        }
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                lines = response.aiter_lines()
                assert (await anext(lines)).startswith("data: ")
        spans = by_name(await request_spans(exporter))
        async with asyncio.timeout(5):
            while not any(r["path"] == "/abort_request" for r in sglang.stats()["last_requests"]):
                await asyncio.sleep(0.02)

    attempt = spans["chat sim-model"]
    assert spans["chat m"].attributes["switchyard.cancelled_phase"] == "mid_stream"
    requests = sglang.stats()["last_requests"]
    (abort,) = [r for r in requests if r["path"] == "/abort_request"]
    (generation,) = [r for r in requests if r["path"] == "/v1/chat/completions"]
    assert abort["headers"]["traceparent"] == generation["headers"]["traceparent"] == sent_traceparent(attempt)


async def test_a_refused_request_is_traced_with_its_reason_and_no_attempt(vllm, exporter):
    cfg = config(
        backend("v1", "vllm", vllm),
        auth={"mode": "keys", "api_keys": [{"sha256": hash_key("sk-tight"), "tenant": "tight"}]},
        tenants={"tight": {"requests_per_minute": 1}},
    )
    async with serving(cfg, tracing_to(exporter)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            body = {"model": "m", "messages": MSG, "max_tokens": 2}
            auth = {"Authorization": "Bearer sk-tight"}
            codes = [(await client.post("/v1/chat/completions", json=body, headers=auth)).status_code for _ in "ab"]
        spans = await request_spans(exporter, 2)

    assert codes == [200, 429]
    roots = [s for s in spans if s.kind == SpanKind.SERVER]
    refused = next(s for s in roots if s.attributes["http.response.status_code"] == 429)
    children = [s for s in spans if s.parent is not None and s.parent.span_id == refused.context.span_id]
    assert {s.name for s in children} == {"switchyard.authenticate", "switchyard.quota"}
    assert refused.attributes["error.type"] == "rate_limit_exceeded"
    # A 4xx is the client's: the server span is not an error, the quota step says why.
    assert refused.status.status_code == StatusCode.UNSET
    quota = next(s for s in children if s.name == "switchyard.quota")
    assert quota.status.status_code == StatusCode.ERROR and quota.attributes["error.type"] == "rate_limit_exceeded"


async def test_a_request_the_sampler_leaves_out_records_nothing_but_still_tells_the_runtime(vllm, exporter):
    vllm.reset()
    none_sampled = tracing_to(exporter, ParentBased(TraceIdRatioBased(0.0)))
    async with serving(config(backend("v1", "vllm", vllm)), none_sampled) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            body = {"model": "m", "messages": MSG, "max_tokens": 2}
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
            # A client's sampled trace is kept whatever the ratio (parent-based sampling).
            continued = {"traceparent": CLIENT_TRACEPARENT}
            assert (await client.post("/v1/chat/completions", json=body, headers=continued)).status_code == 200
        spans = await request_spans(exporter)

    unsampled, sampled = generation_headers(vllm)
    assert int(unsampled["traceparent"].rsplit("-", 1)[1], 16) & 1 == 0  # the sampled flag is off
    assert TRACEPARENT.fullmatch(unsampled["traceparent"]).group(1) != f"{CLIENT_TRACE:032x}"
    assert {s.context.trace_id for s in spans} == {CLIENT_TRACE}
    (attempt,) = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert sampled["traceparent"] == sent_traceparent(attempt)


async def test_tracing_off_sends_no_trace_context_upstream(vllm):
    vllm.reset()
    async with serving(config(backend("v1", "vllm", vllm)), NoTracing()) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            body = {"model": "m", "messages": MSG, "max_tokens": 2}
            response = await client.post("/v1/chat/completions", json=body, headers={"traceparent": CLIENT_TRACEPARENT})
            assert response.status_code == 200
    (headers,) = generation_headers(vllm)
    assert "traceparent" not in headers and headers["x-request-id"]


async def test_reads_of_stored_responses_are_traced_like_requests(vllm, exporter):
    """GET, input_items and DELETE of a stored response: each one trace through the one
    tracing, with its tenant, status, the authentication and quota steps, and the
    client's trace continued; a 404 read is traced as the client's error."""
    cfg = config(
        backend("v1", "vllm", vllm),
        auth={"mode": "keys", "api_keys": [{"sha256": hash_key("sk-acme"), "tenant": "acme"}]},
        tenants={"acme": {"requests_per_minute": 100}},
    )
    async with serving(cfg, tracing_to(exporter)) as served:
        client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="sk-acme", max_retries=0)
        made = await client.responses.create(model="m", input="hi", max_output_tokens=16)
        await request_spans(exporter)
        exporter.clear()
        traced = client.with_options(default_headers={"traceparent": CLIENT_TRACEPARENT})
        await traced.responses.retrieve(made.id)
        await client.responses.input_items.list(made.id)
        await client.responses.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(made.id)
        spans = await request_spans(exporter, 4)

    roots = [s for s in spans if s.kind == SpanKind.SERVER]
    assert [s.name for s in roots] == ["responses.get", "responses.input_items", "responses.delete", "responses.get"]
    assert [s.attributes["http.response.status_code"] for s in roots] == [200, 200, 200, 404]
    for root in roots:
        assert root.attributes["switchyard.tenant"] == "acme"
        assert root.attributes["gen_ai.operation.name"] == root.name
        children = {s.name for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id}
        assert {"switchyard.authenticate", "switchyard.quota"} <= children, (root.name, children)
    assert roots[0].context.trace_id == CLIENT_TRACE and roots[0].parent.span_id == CLIENT_SPAN
    assert roots[1].parent is None  # no client context: a trace of its own
    assert roots[3].attributes["error.type"] and roots[3].status.status_code == StatusCode.UNSET
