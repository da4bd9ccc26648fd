"""Each read of the response store is written down and traced as one request
(gateway/openai/responses/routes.py `_read`): its operation, tenant, ids, status, the
bytes it sent charged as tokens, and a refusal's message; without a recorder its trace
is ended by the route itself."""

from __future__ import annotations

import pytest

from adapters.base import Finish, TextDelta, Usage
from adapters.errors import GatewayError
from gateway.protection.gate import stored_read_usage
from policies.auth import Principal
from tests.gateway.openai.responses.served import TENANTS, ScriptedModel, http_client, responses_gateway

SAY = [TextDelta(0, "hello"), Finish(0, "stop"), Usage(3, 1)]


class Trace:
    def __init__(self, scope, operation):
        self.scope, self.operation, self.finished = scope, operation, []

    def finish(self, ctx, outcome):
        self.finished.append((ctx, outcome))


class Tracing:
    def __init__(self):
        self.traces: list[Trace] = []

    def request(self, scope, operation):
        self.traces.append(Trace(scope, operation))
        return self.traces[-1]


class Recorder:
    def __init__(self):
        self.finished = []

    def finish(self, ctx, outcome):
        self.finished.append((ctx, outcome))


async def test_each_read_is_recorded_as_a_request_of_its_tenant():
    async with responses_gateway(ScriptedModel([SAY])) as gw:
        async with http_client(gw, "alice") as client:
            rid = (await client.post("/v1/responses", json={"model": "m", "input": "hi"})).json()["id"]
            routes = gw.responses_api
            routes.recorder, routes.tracing = Recorder(), Tracing()
            got = await client.get(f"/v1/responses/{rid}")
            items = await client.get(f"/v1/responses/{rid}/input_items", headers={"x-request-id": "mine-2"})
            refused = await client.get(f"/v1/responses/{rid}", params={"limit": "1"})
            await client.delete(f"/v1/responses/{rid}")
    (g, g_out), (i, i_out), (r, r_out), (d, d_out) = routes.recorder.finished
    assert [c.operation for c in (g, i, r, d)] == [
        "responses.get",
        "responses.input_items",
        "responses.get",
        "responses.delete",
    ]
    assert [t.operation for t in routes.tracing.traces] == [c.operation for c in (g, i, r, d)]
    assert all(t.scope["path"].startswith("/v1/responses/") for t in routes.tracing.traces)
    assert [c.trace for c in (g, i, r, d)] == routes.tracing.traces
    assert {c.tenant for c in (g, i, r, d)} == {"alice"}
    assert i.request_id == "mine-2" and i.upstream_id != "mine-2" and g.request_id == g.upstream_id
    assert (g_out.status, g_out.usage, g_out.error) == (200, stored_read_usage(len(got.content)), None)
    assert (i_out.status, i_out.usage) == (200, stored_read_usage(len(items.content)))
    assert (r_out.status, r_out.error) == (400, refused.json()["error"]["message"])
    assert r_out.usage == stored_read_usage(len(refused.content))
    assert d_out.status == 200


async def test_without_a_recorder_the_route_ends_the_trace_itself():
    async with responses_gateway(ScriptedModel([])) as gw:
        routes = gw.responses_api
        routes.recorder, routes.tracing = None, Tracing()
        async with http_client(gw) as client:
            answer = await client.get("/v1/responses/resp_missing")
    [trace] = routes.tracing.traces
    [(ctx, outcome)] = trace.finished
    assert ctx.operation == "responses.get" and outcome.status == answer.status_code == 404


async def test_a_read_answers_with_the_tenant_s_rate_limit_headers():
    tenants = {name: {} for name in TENANTS} | {"t": {"requests_per_minute": 50}}
    async with responses_gateway(ScriptedModel([SAY]), tenants=tenants) as gw:
        async with http_client(gw) as client:
            rid = (await client.post("/v1/responses", json={"model": "m", "input": "hi"})).json()["id"]
            got = await client.get(f"/v1/responses/{rid}")
    assert got.status_code == 200 and got.headers["x-ratelimit-limit-requests"] == "50"


async def test_a_body_is_read_for_its_principal_with_the_gateway_s_request_id():
    async with responses_gateway(ScriptedModel([SAY])) as gw:
        async with http_client(gw) as client:
            rid = (await client.post("/v1/responses", json={"model": "m", "input": "hi"})).json()["id"]
        routes = gw.responses_api
        everything = Principal("t", None, ["*"], 0)
        intent = await routes.parse({"model": "m", "input": "more", "previous_response_id": rid}, "up-1", everything)
        assert intent.requests[0].request_id == "up-1"
        assert routes._models_of(everything)("m") is True
        elsewhere = Principal("t", None, ["other-*"], 0)
        assert routes._models_of(elsewhere)("m") is False and routes._models_of(elsewhere)("other-1") is True
        with pytest.raises(GatewayError) as info:
            await routes.parse({"model": "other-1", "input": "x", "previous_response_id": rid}, "up-2", elsewhere)
        assert (info.value.status, info.value.param) == (404, "previous_response_id")
