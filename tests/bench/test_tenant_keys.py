"""Each tenant's requests carry that tenant's key, so a gateway can tell them apart."""

from __future__ import annotations

from aiohttp import web

from bench.client import Client, ClientConfig
from bench.runner import LoadPlan, Runner
from bench.workloads import assign_tenants, synthetic
from tests.served_app import served

STREAM = b'data: {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'


async def test_each_tenant_sends_its_own_key() -> None:
    seen: list[str | None] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(STREAM)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with served(app) as url:
        sessions = synthetic(40, 4, 2)
        assign_tenants(sessions, [("acme", 1.0), ("beta", 1.0), ("anon", 1.0)])
        cfg = ClientConfig(base_url=url, model="m", api_keys={"acme": "sk-acme", "beta": "sk-beta"})
        async with Client(cfg) as client:
            records = await Runner(client, LoadPlan(sessions, concurrency=4)).run()
    assert all(r.outcome == "ok" for r in records)
    expected = {"acme": "Bearer sk-acme", "beta": "Bearer sk-beta", "anon": None}
    assert sorted(seen, key=str) == sorted((expected[r.tenant] for r in records), key=str)
    assert {r.tenant for r in records} == {"acme", "beta", "anon"}
