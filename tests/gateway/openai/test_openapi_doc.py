"""GET /openapi.json documents every route the gateway serves to tenants, and the
routes FastAPI carries for it keep the gateway's own errors (its envelope, its auth,
its body limits): FastAPI describes them, it does not answer for them."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from gateway.app import Gateway, create_app
from gateway.config.schema import parse_config
from processes import free_port
from tests.gateway.live_gateway import serving

KEY = "sk-doc-test"
CONFIG = {
    "auth": {"mode": "keys", "api_keys": [{"sha256": hashlib.sha256(KEY.encode()).hexdigest(), "tenant": "t"}]},
    "tenants": {"t": {}},
    # Nothing listens there: the document and the errors below never reach a backend.
    "models": {"m": {"backends": [{"name": "b", "adapter": "openai", "url": f"http://127.0.0.1:{free_port()}/v1"}]}},
}
AUTH = {"Authorization": f"Bearer {KEY}"}
# operators', not tenants' (the rollout admin: gateway/observe/admin_rollouts.py)
NOT_DOCUMENTED = {
    "/metrics",
    "/admin/reload",
    "/admin/config",
    "/openapi.json",
    "/admin/rollouts",
    "/admin/rollouts/{model:path}",
    "/admin/rollouts/{model:path}/{action}",
}


@pytest.fixture
async def served():
    async with serving(CONFIG) as s:
        async with httpx.AsyncClient(base_url=s.url, timeout=10) as client:
            yield s, client


async def test_the_document_lists_every_served_route_with_its_shapes(served):
    _, client = served
    doc = (await client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.") and doc["info"]["title"] == "Switchyard"
    documented = {(path, method) for path, item in doc["paths"].items() for method in item}
    served_routes = {
        (route.path.replace(":path", ""), method.lower())
        for route in create_app(Gateway(parse_config(CONFIG))).routes
        for method in (getattr(route, "methods", None) or ())
        if route.path not in NOT_DOCUMENTED and method != "HEAD"
    }
    assert served_routes and served_routes <= documented, served_routes - documented
    schemas = doc["components"]["schemas"]
    assert {"ModelList", "ModelCard", "EmbeddingList", "ErrorEnvelope"} <= set(schemas)
    embeddings = doc["paths"]["/v1/embeddings"]["post"]
    body = embeddings["requestBody"]["content"]["application/json"]["schema"]
    assert {"model", "input"} <= set(body["required"]) and "encoding_format" in body["properties"]
    assert embeddings["responses"]["429"]["content"]["application/json"]["schema"]["$ref"].endswith("ErrorEnvelope")
    assert "/v1/chat/completions" in doc["paths"] and "/v1/responses" in doc["paths"]


async def test_documented_routes_keep_the_gateways_errors(served):
    _, client = served
    # No credential: the gateway's 401 in OpenAI's envelope (FastAPI checks nothing).
    r = await client.get("/v1/models")
    assert r.status_code == 401 and r.json()["error"]["type"]
    # A body FastAPI would answer 422 for is the gateway's 400, naming what is wrong.
    r = await client.post("/v1/embeddings", content=b"{not json", headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = await client.post(
        "/v1/embeddings", json={"model": "m", "input": [[[[1]]]] * 2, "x": {"a": [1] * 3}}, headers=AUTH
    )
    assert r.status_code == 400 and "error" in r.json()
    # A model id with a slash, one this tenant may not see: 404, never a 500 or FastAPI's own 404 body.
    r = await client.get("/v1/models/org/secret-model", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = await client.post("/v1/models", headers=AUTH)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    r = await client.get("/v1/models", headers=AUTH)
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["m"]
