"""The one front door (gateway/intake.py), through the whole HTTP path to real vLLM
simulators: every API route (chat, completions, Responses, embeddings, tokenize,
detokenize) is authenticated, read, model-checked, given its deadline and admitted by
the same steps, so what those steps promise holds on each route alike."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest
from starlette.requests import ClientDisconnect

from policies.auth import hash_key
from simulators.testing import start_in_process
from tests.gateway.live_gateway import Served, serving
from tests.procs import keys_auth_config

MSG = [{"role": "user", "content": "hi"}]
# Each route, with a body its model serves ("m" generates, "e" embeds).
ROUTES = {
    "/v1/chat/completions": {"model": "m", "messages": MSG, "max_tokens": 2},
    "/v1/completions": {"model": "m", "prompt": "hi", "max_tokens": 2},
    "/v1/responses": {"model": "m", "input": "hi", "max_output_tokens": 16},
    "/v1/embeddings": {"model": "e", "input": "hi"},
    "/tokenize": {"model": "m", "prompt": "hi"},
    "/detokenize": {"model": "m", "tokens": [1, 2]},
}


def tenant_of(path: str) -> str:
    return "t" + path.replace("/", "-")


@pytest.fixture(scope="module")
def sims():
    with (
        start_in_process("vllm", health_latency=0.0, itl_ms=20, output_tokens=400) as gen,
        start_in_process("vllm", health_latency=0.0, runner="pooling", embedding_dim=8) as pool,
    ):
        yield gen, pool


def config(sims, **extra) -> dict:
    gen, pool = sims
    return {
        "access_log": False,
        "models": {
            "m": {
                "backends": [
                    {"name": "g", "adapter": "vllm", "url": gen.url, "served_model": "sim-model", "max_inflight": 1}
                ]
            },
            "e": {
                "backends": [
                    {
                        "name": "p",
                        "adapter": "vllm",
                        "url": pool.url,
                        "served_model": "sim-model",
                        "options": {"embeddings": True},
                    }
                ]
            },
        },
        **extra,
    }


async def test_every_route_counts_a_tenant_over_its_limit_as_a_rejection(sims):
    # One tenant per route, one request a minute each: the second is a 429 refused before
    # any work, counted as the tenant's rejection whatever the route (embeddings' and
    # tokenize's were not: their refusal was recorded without its code).
    tenants = {tenant_of(p): {"requests_per_minute": 1} for p in ROUTES}
    auth = keys_auth_config({f"sk-{t}": t for t in tenants})
    async with serving(config(sims, auth=auth, tenants=tenants)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            for path, body in ROUTES.items():
                headers = {"Authorization": f"Bearer sk-{tenant_of(path)}"}
                first = await client.post(path, json=body, headers=headers)
                assert first.status_code == 200, (path, first.text)
                second = await client.post(path, json=body, headers=headers)
                assert second.status_code == 429 and second.json()["error"]["code"] == "rate_limit_exceeded"
        for path in ROUTES:
            tenant = tenant_of(path)
            assert served.metric("switchyard_tenant_rejections_total", tenant=tenant, reason="rate_limited") == 1, path


async def wait_until(predicate, timeout: float = 20.0) -> None:
    """Polls `predicate` (generous: a loaded two-core machine; nothing here is timed)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def leave_after_queued(served: Served, path: str, body: dict) -> None:
    """Send `body` on a raw socket, wait until it is queued, then close the socket."""
    host, port = served.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = orjson.dumps(body)
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    writer.write(head.encode() + data)
    await writer.drain()
    model = body["model"]
    await wait_until(lambda: served.metric("switchyard_admission_queue_depth", model=model) == 1)
    writer.close()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
async def test_a_client_leaving_while_queued_is_counted_in_the_queued_phase(sims, path):
    # The model takes one request at a time: a second waits in the admission queue, and
    # its client leaving there is the `queued` phase of the one cancellation counter.
    async with serving(config(sims)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as client:
            holder = asyncio.create_task(
                client.post("/v1/chat/completions", json={**ROUTES["/v1/chat/completions"], "max_tokens": 400})
            )
            await wait_until(lambda: served.metric("switchyard_inflight_requests", model="m") == 1)
            await leave_after_queued(served, path, ROUTES[path])
            await wait_until(lambda: served.metric("switchyard_client_cancellations_total", phase="queued") == 1)
            assert served.metric("switchyard_admission_queue_depth", model="m") == 0
            assert not holder.done()  # dropped while the holder runs, not when its turn came
            holder.cancel()
            with pytest.raises(asyncio.CancelledError):
                await holder
        phases = ("upstream_headers", "retry_backoff", "mid_stream", "non_streaming")
        assert all(served.metric("switchyard_client_cancellations_total", phase=p) == 0 for p in phases)


@pytest.mark.parametrize("path", ["/v1/embeddings", "/tokenize", "/detokenize"])
async def test_a_one_shot_call_keeps_the_deadline_its_client_set(sims, path):
    # Queued behind a long generation on a one-at-a-time model, a call whose client gave
    # it half a second ends at that deadline (504), not at the queue's minute.
    body = {**ROUTES[path], "model": "m"}
    cfg = config(sims, admission={"max_queue_wait_s": 60})
    cfg["models"]["m"]["backends"][0]["options"] = {"embeddings": True}
    async with serving(cfg) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            long = {**ROUTES["/v1/chat/completions"], "max_tokens": 400}
            holder = asyncio.create_task(client.post("/v1/chat/completions", json=long))
            await wait_until(lambda: served.metric("switchyard_inflight_requests", model="m") == 1)
            late = await client.post(path, json=body, headers={"x-request-timeout": "0.5"})
            assert late.status_code == 504 and late.json()["error"]["code"] == "deadline_exceeded"
            assert not holder.done()  # ended by its own deadline, not by the holder finishing
            holder.cancel()
            with pytest.raises(asyncio.CancelledError):
                await holder


async def test_every_route_is_traced_under_its_operation_name(sims):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gateway.observe.otel_trace import OtelTracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with serving(config(sims), tracing=OtelTracing(provider)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            for path, body in ROUTES.items():
                assert (await client.post(path, json=body)).status_code == 200, path
    servers = [s for s in exporter.get_finished_spans() if s.kind.name == "SERVER"]
    operations = [s.attributes["gen_ai.operation.name"] for s in servers]
    # the Responses API is generate_content (the GenAI conventions; openai.api.type says responses)
    assert operations == ["chat", "text_completion", "generate_content", "embeddings", "tokenize", "detokenize"]


@pytest.mark.parametrize("path", list(ROUTES))
async def test_an_unknown_model_answers_alike_on_every_route(sims, path):
    async with serving(config(sims)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            answer = await client.post(path, json={**ROUTES[path], "model": "nope"})
    assert answer.status_code == 404
    assert answer.json()["error"] == {
        "message": "The model `nope` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


async def test_a_refusal_carries_the_client_s_request_id_or_the_gateway_s_own(sims):
    async with serving(config(sims)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            body = {**ROUTES["/v1/chat/completions"], "model": "nope"}
            mine = await client.post("/v1/chat/completions", json=body, headers={"x-request-id": "client-id.1"})
            bad = await client.post("/v1/chat/completions", json=body, headers={"x-request-id": "not an id"})
    assert mine.status_code == bad.status_code == 404
    assert mine.headers["x-request-id"] == "client-id.1"  # kept: the client's, for its own logs
    own = bad.headers["x-request-id"]  # not of the allowed shape: the gateway's own id stands in
    assert own != "not an id" and len(own) == 32 and int(own, 16) >= 0


@pytest.mark.parametrize(("levels", "status"), [(7, 200), (8, 400)])
async def test_the_configured_json_depth_is_the_one_enforced(sims, levels, status):
    # limits.max_json_depth 8 (below the default 64): the body is a level, so a field of 7
    # nested arrays fits and one of 8 does not
    nested: object = 1
    for _ in range(levels):
        nested = [nested]
    body = {**ROUTES["/v1/chat/completions"], "metadata_x": nested}
    async with serving(config(sims, limits={"max_json_depth": 8})) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            answer = await client.post("/v1/chat/completions", json=body)
    assert answer.status_code == status, answer.text
    if status == 400:
        assert answer.json()["error"]["param"] == "metadata_x" and "8 levels" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("raised", "status", "code"),
    [(RuntimeError("a bug"), 500, "internal_error"), (ClientDisconnect(), 499, "client_closed")],
    ids=["bug", "client-left"],
)
async def test_what_admission_raises_is_answered_in_the_envelope_with_the_request_id(
    sims, monkeypatch, raised, status, code
):
    # A bug is a logged 500 internal_error, a client that left while its body was read a
    # 499: each an OpenAI error with the request's id, never a bare 500 from the server.
    def failing(*args, **kwargs):
        raise raised

    monkeypatch.setattr("gateway.intake.parse_json_body", failing)
    async with serving(config(sims)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            answer = await client.post(
                "/v1/chat/completions", json=ROUTES["/v1/chat/completions"], headers={"x-request-id": "rid-1"}
            )
    assert answer.status_code == status and answer.json()["error"]["code"] == code
    assert answer.headers["x-request-id"] == "rid-1"


async def test_a_call_no_backend_of_the_model_serves_names_the_call_and_the_runtimes(sims):
    async with serving(config(sims)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            answer = await client.post("/v1/embeddings", json={**ROUTES["/v1/embeddings"], "model": "m"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_by_runtime", "model")
    assert error["message"] == (
        "The model `m` does not serve embeddings (/v1/embeddings): its backends (vLLM) do not offer it."
    )


async def test_a_key_narrowed_to_some_models_reaches_those_and_no_other(sims):
    auth = {"mode": "keys", "api_keys": [{"sha256": hash_key("sk-narrow"), "tenant": "t", "models": ["m"]}]}
    async with serving(config(sims, auth=auth)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            headers = {"Authorization": "Bearer sk-narrow"}
            mine = await client.post("/v1/chat/completions", json=ROUTES["/v1/chat/completions"], headers=headers)
            other = await client.post("/v1/embeddings", json=ROUTES["/v1/embeddings"], headers=headers)
    assert mine.status_code == 200, mine.text
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"


async def test_a_model_that_rejects_unknown_parameters_names_the_first(sims):
    cfg = config(sims)
    cfg["models"]["m"]["unknown_params"] = "reject"
    async with serving(cfg) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            body = {**ROUTES["/v1/chat/completions"], "vendor_knob": 1}
            refused = await client.post("/v1/chat/completions", json=body)
            fine = await client.post("/v1/chat/completions", json=ROUTES["/v1/chat/completions"])
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "vendor_knob"
    assert fine.status_code == 200


@pytest.mark.parametrize(("n", "status"), [(2, 200), (3, 400)])
async def test_a_request_holds_one_unit_of_its_tenant_s_concurrency_per_choice(sims, n, status):
    # max_concurrent 2: two choices fit, three never can (a 400 naming n, not a retry)
    auth = keys_auth_config({"sk-two": "two"})
    async with serving(config(sims, auth=auth, tenants={"two": {"max_concurrent": 2}})) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            body = {**ROUTES["/v1/chat/completions"], "n": n}
            answer = await client.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-two"})
    assert answer.status_code == status, answer.text
    if status == 400:
        assert (answer.json()["error"]["code"], answer.json()["error"]["param"]) == (
            "request_exceeds_concurrency_limit",
            "n",
        )


async def test_a_batched_completion_holds_a_unit_per_prompt_and_choice(sims):
    # two prompts, one choice each: two units against max_concurrent 1, a 400 naming the prompt
    auth = keys_auth_config({"sk-one": "one"})
    async with serving(config(sims, auth=auth, tenants={"one": {"max_concurrent": 1}})) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            body = {**ROUTES["/v1/completions"], "prompt": ["a", "b"]}
            answer = await client.post("/v1/completions", json=body, headers={"Authorization": "Bearer sk-one"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "request_exceeds_concurrency_limit"
