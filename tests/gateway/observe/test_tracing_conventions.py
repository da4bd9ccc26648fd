"""The trace's attributes against the OpenTelemetry GenAI and HTTP semantic conventions,
one test per attribute (gateway/observe/otel_trace.py): a real gateway in process with
its spans in the SDK's in-memory exporter, in front of vLLM simulators."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from simulators.testing import start_in_process
from tests.gateway.live_gateway import serving
from tests.gateway.observe.test_tracing import request_spans, tracing_to

MSG = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": MSG, "max_tokens": 3}


@pytest.fixture(scope="module")
def sims():
    with (
        start_in_process("vllm", health_latency=0.0) as gen,
        start_in_process("vllm", health_latency=0.0, runner="pooling", embedding_dim=8) as pool,
    ):
        yield gen, pool


def config(sims) -> dict:
    gen, pool = sims
    embed = {
        "name": "p",
        "adapter": "vllm",
        "url": pool.url,
        "served_model": "sim-model",
        "options": {"embeddings": True},
    }
    return {
        "access_log": False,
        "models": {
            "m": {"backends": [{"name": "g", "adapter": "vllm", "url": gen.url, "served_model": "sim-model"}]},
            "e": {"backends": [embed]},
        },
    }


async def traced(sims, path: str, body: dict) -> tuple[ReadableSpan, ReadableSpan, httpx.Response]:
    """The request's SERVER span, its one CLIENT span and the answer."""
    exporter = InMemorySpanExporter()
    async with serving(config(sims), tracing_to(exporter)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            answer = await client.post(path, json=body)
        spans = await request_spans(exporter)
    (server,) = [s for s in spans if s.kind == SpanKind.SERVER]
    (attempt,) = [s for s in spans if s.kind == SpanKind.CLIENT]
    return server, attempt, answer


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/chat/completions", CHAT), ("/v1/embeddings", {"model": "e", "input": "hi"})],
)
async def test_the_server_span_has_the_http_server_attributes(sims, path, body):
    server, _, answer = await traced(sims, path, body)
    assert answer.status_code == 200
    attrs = server.attributes
    assert attrs["http.request.method"] == "POST"
    assert attrs["url.path"] == path and attrs["http.route"] == path
    assert attrs["url.scheme"] == "http"
    assert attrs["http.response.status_code"] == 200


async def test_usage_and_response_attributes_are_on_the_client_span_too(sims):
    server, attempt, answer = await traced(sims, "/v1/chat/completions", CHAT)
    body = answer.json()
    for span in (server, attempt):
        attrs = span.attributes
        assert attrs["gen_ai.usage.input_tokens"] == body["usage"]["prompt_tokens"], span.name
        assert attrs["gen_ai.usage.output_tokens"] == body["usage"]["completion_tokens"], span.name
        assert list(attrs["gen_ai.response.finish_reasons"]) == ["length"], span.name
        assert attrs["gen_ai.response.id"] == body["id"], span.name


async def test_the_provider_name_is_on_both_spans(sims):
    server, attempt, _ = await traced(sims, "/v1/chat/completions", CHAT)
    assert server.attributes["gen_ai.provider.name"] == attempt.attributes["gen_ai.provider.name"] == "vllm"


async def test_the_response_model_is_the_served_model_not_the_alias(sims):
    server, attempt, _ = await traced(sims, "/v1/chat/completions", CHAT)
    assert server.attributes["gen_ai.request.model"] == "m"  # what the client asked for
    assert server.attributes["gen_ai.response.model"] == attempt.attributes["gen_ai.response.model"] == "sim-model"


async def test_top_k_is_a_double(sims):
    server, _, _ = await traced(sims, "/v1/chat/completions", {**CHAT, "top_k": 5})
    value = server.attributes["gen_ai.request.top_k"]
    assert isinstance(value, float) and value == 5.0


async def test_a_streamed_request_says_gen_ai_request_stream(sims):
    streamed, _, _ = await traced(sims, "/v1/chat/completions", {**CHAT, "stream": True})
    whole, _, _ = await traced(sims, "/v1/chat/completions", CHAT)
    assert streamed.attributes["gen_ai.request.stream"] is True
    assert "gen_ai.request.stream" not in whole.attributes  # set if and only if streaming


async def test_the_responses_api_is_generate_content_with_its_api_type(sims):
    server, attempt, answer = await traced(
        sims, "/v1/responses", {"model": "m", "input": "hi", "max_output_tokens": 16}
    )
    assert answer.status_code == 200
    assert server.name == "generate_content m" and attempt.name == "generate_content sim-model"
    assert server.attributes["gen_ai.operation.name"] == "generate_content"
    assert server.attributes["openai.api.type"] == "responses"
    chat, _, _ = await traced(sims, "/v1/chat/completions", CHAT)
    assert (
        chat.attributes["gen_ai.operation.name"] == "chat" and chat.attributes["openai.api.type"] == "chat_completions"
    )


async def test_embeddings_are_traced_as_the_embeddings_operation(sims):
    server, attempt, answer = await traced(sims, "/v1/embeddings", {"model": "e", "input": "hi there"})
    assert answer.status_code == 200
    assert server.name == "embeddings e" and attempt.name == "embeddings sim-model"
    assert server.attributes["gen_ai.operation.name"] == attempt.attributes["gen_ai.operation.name"] == "embeddings"
    assert server.attributes["gen_ai.usage.input_tokens"] == answer.json()["usage"]["prompt_tokens"]
    assert (
        "gen_ai.usage.output_tokens" not in server.attributes and "gen_ai.request.max_tokens" not in server.attributes
    )
    assert attempt.attributes["gen_ai.provider.name"] == "vllm"


@pytest.mark.parametrize(
    ("path", "body"), [("/tokenize", {"model": "m", "prompt": "hi"}), ("/detokenize", {"model": "m", "tokens": [1, 2]})]
)
async def test_tokenize_and_detokenize_are_traced(sims, path, body):
    server, attempt, answer = await traced(sims, path, body)
    assert answer.status_code == 200
    operation = path.strip("/")
    assert server.name == f"{operation} m" and server.attributes["gen_ai.operation.name"] == operation
    assert attempt.name == f"{operation} sim-model" and attempt.parent.span_id == server.context.span_id
