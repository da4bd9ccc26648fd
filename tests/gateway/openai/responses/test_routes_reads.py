"""The store's three HTTP routes in process (gateway/openai/responses/routes.py): GET,
input_items and DELETE answer through the gateway's app as the handlers decide, each
only for a caller with a key, each with the request's id, and a refusal as the
gateway's error envelope; a response that could not be stored is counted by its code."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from adapters.base import Finish, TextDelta, Usage
from adapters.errors import GatewayError
from gateway.config.schema import parse_config
from gateway.observe.tracing import NoTracing
from gateway.openai.responses import MemoryResponseStore, RedisResponseStore, StoredResponse
from gateway.openai.responses.routes import ResponsesRoutes, build_response_store
from policies.auth import hash_key
from tests.gateway.openai.responses.served import TENANTS, ScriptedModel, http_client, responses_gateway

SAY = [TextDelta(0, "hello"), Finish(0, "stop"), Usage(3, 1)]


async def test_get_list_and_delete_a_stored_response_over_http():
    async with responses_gateway(ScriptedModel([SAY])) as gw:
        async with http_client(gw) as client:
            created = (await client.post("/v1/responses", json={"model": "m", "input": "hi"})).json()
            rid = created["id"]
            got = await client.get(f"/v1/responses/{rid}")
            assert got.status_code == 200 and got.json() == created
            listed = await client.get(f"/v1/responses/{rid}/input_items", params={"order": "asc", "limit": "1"})
            assert listed.status_code == 200
            assert [i["content"][0]["text"] for i in listed.json()["data"]] == ["hi"]
            refused = await client.get(
                f"/v1/responses/{rid}", params={"stream": "true"}, headers={"x-request-id": "mine-1"}
            )
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "stream"
            assert refused.headers["x-request-id"] == "mine-1"  # the client's own, on the refusal
            deleted = await client.delete(f"/v1/responses/{rid}")
            assert deleted.json() == {"id": rid, "object": "response", "deleted": True}
            gone = await client.get(f"/v1/responses/{rid}")
            assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
            gone_items = await client.get(f"/v1/responses/{rid}/input_items")
            assert gone_items.status_code == 404 and gone_items.json()["error"]["param"] == "response_id"


async def test_another_tenant_and_a_caller_without_a_key_read_nothing():
    async with responses_gateway(ScriptedModel([SAY])) as gw:
        async with http_client(gw, "alice") as alice:
            rid = (await alice.post("/v1/responses", json={"model": "m", "input": "hi"})).json()["id"]
        async with http_client(gw, "bob") as bob:
            for answer in (await bob.get(f"/v1/responses/{rid}"), await bob.delete(f"/v1/responses/{rid}")):
                assert answer.status_code == 404
        async with http_client(gw, "nobody") as stranger:
            answer = await stranger.get(f"/v1/responses/{rid}")
            assert answer.status_code == 401 and answer.headers["x-request-id"]  # the gateway's own
        async with http_client(gw, "alice") as alice:
            assert (await alice.get(f"/v1/responses/{rid}")).status_code == 200


class _Failing(MemoryResponseStore):
    async def put(self, tenant, record) -> None:
        raise GatewayError(503, "The response store is unavailable.", code="response_store_unavailable")


async def test_a_response_not_stored_is_counted_by_its_code():
    async with responses_gateway(ScriptedModel([SAY])) as gw:
        await gw.responses_api.store.aclose()
        gw.responses_api.store = _Failing()
        async with http_client(gw) as client:
            answer = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
        assert answer.status_code == 200 and answer.json()["status"] == "completed"
        counter = gw.responses_api.not_stored
        assert counter.labels("response_store_unavailable")._value.get() == 1


SHARES = {"tenant_max_entries": 7, "tenant_max_bytes": 4096}


async def test_every_configured_bound_reaches_the_store_built():
    memory = build_response_store(*_store_config({"ttl_s": 60, "max_entries": 5, "max_bytes": 2048, **SHARES}))
    assert isinstance(memory, MemoryResponseStore)
    assert (memory.ttl_s, memory.max_entries, memory.max_bytes) == (60, 5, 2048)
    assert (memory.tenant_max_entries, memory.tenant_max_bytes) == (7, 4096)
    redis = build_response_store(
        *_store_config({"kind": "redis", "url": "redis://127.0.0.1:9/0", "ttl_s": 2.5, "timeout_s": 3.5, **SHARES})
    )
    assert isinstance(redis, RedisResponseStore)
    assert (redis.ttl_ms, redis.redis.pool_wait_s) == (2500, 3.5)
    assert (redis.tenant_max_entries, redis.tenant_max_bytes, redis.max_record_bytes) == (7, 4096, 4096)
    await redis.aclose()


def _store_config(response_store: dict):
    config = parse_config({"response_store": response_store})
    return config.response_store, config.quota_store


async def test_the_not_stored_counter_is_the_gateway_s_own_metric():
    registry = CollectorRegistry()
    async with responses_gateway(ScriptedModel([])) as gw:
        routes = ResponsesRoutes(gw.config, gw.protection, registry)
        routes._count_not_stored("response_store_full")
        await routes.aclose()
        # the gateway's own routes write reads down and trace them with the gateway's
        assert gw.responses_api.recorder is gw.recorder and gw.responses_api.tracing is gw.tracing
    assert registry.get_sample_value("switchyard_responses_not_stored_total", {"reason": "response_store_full"}) == 1
    assert isinstance(routes.tracing, NoTracing) and routes.recorder is None


async def test_a_key_narrowed_to_some_models_reads_nothing_made_on_another():
    keys = [{"sha256": hash_key(t), "tenant": t} for t in TENANTS]
    keys.append({"sha256": hash_key("narrow"), "tenant": "t", "models": ["m"]})
    auth = {"mode": "keys", "api_keys": keys}
    async with responses_gateway(ScriptedModel([SAY]), auth=auth) as gw:
        other = {"id": "resp_other", "object": "response", "model": "other", "output": []}
        await gw.responses_api.store.put("t", StoredResponse(other, []))
        async with http_client(gw, "narrow") as narrow:
            mine = (await narrow.post("/v1/responses", json={"model": "m", "input": "hi"})).json()["id"]
            assert (await narrow.get(f"/v1/responses/{mine}")).status_code == 200
            for answer in (
                await narrow.get("/v1/responses/resp_other"),
                await narrow.get("/v1/responses/resp_other/input_items"),
                await narrow.delete("/v1/responses/resp_other"),
            ):
                assert answer.status_code == 404
        async with http_client(gw, "t") as everything:
            assert (await everything.get("/v1/responses/resp_other")).status_code == 200


async def test_the_input_items_query_is_read():
    async with responses_gateway(ScriptedModel([SAY])) as gw:
        async with http_client(gw) as client:
            two = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
            rid = (await client.post("/v1/responses", json={"model": "m", "input": two})).json()["id"]
            page = (await client.get(f"/v1/responses/{rid}/input_items", params={"order": "asc", "limit": "1"})).json()
    assert [i["content"][0]["text"] for i in page["data"]] == ["one"] and page["has_more"] is True
