"""The per-tenant counters: requests by status, tokens by direction, refusals by
reason, with the tenant label kept to the tenants the config names (every other
tenant, the anonymous one and callers that never authenticated count as "other")."""

from __future__ import annotations

import httpx
import pytest

from gateway.config.schema import parse_config
from gateway.observe.context import Outcome
from gateway.observe.recorder import OTHER_TENANT, TenantLabels, rejection_reason
from policies.auth import hash_key
from simulators.testing import start_in_process
from tests.gateway.live_gateway import serving
from tests.policies.jwt_issuer import AUD, ISS, Issuer
from tests.procs import keys_auth_config

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def sim():
    with start_in_process("vllm", health_latency=0.0) as s:
        yield s


def models(sim) -> dict:
    return {"m": {"backends": [{"name": "v1", "adapter": "vllm", "url": sim.url, "served_model": "sim-model"}]}}


def test_the_label_is_a_configured_tenant_or_other():
    config = parse_config(
        {
            "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key("k"), "tenant": "acme"}]},
            "tenants": {"acme": {}, "globex": {}},
        }
    )
    labels = TenantLabels.of(config)
    assert [labels.label(t) for t in ("acme", "globex", "initech", "anonymous", None)] == [
        "acme",
        "globex",
        OTHER_TENANT,
        OTHER_TENANT,
        OTHER_TENANT,
    ]
    # Without a tenants section, the API keys' tenants are the configured ones.
    keys_only = parse_config({"auth": {"mode": "keys", "api_keys": [{"sha256": hash_key("k"), "tenant": "acme"}]}})
    assert TenantLabels.of(keys_only).label("acme") == "acme"
    # Auth off: the anonymous tenant is named only when the config names it.
    assert TenantLabels.of(parse_config({})).label("anonymous") == OTHER_TENANT
    assert TenantLabels.of(parse_config({"tenants": {"anonymous": {}}})).label("anonymous") == "anonymous"


def test_refusals_before_admission_are_counted_by_reason_and_nothing_else_is():
    def refused(status: int, code: str | None) -> str | None:
        return rejection_reason(Outcome(status, code=code, admitted=False))

    assert refused(401, "invalid_api_key") == refused(401, "invalid_token") == refused(403, "unknown_tenant") == "auth"
    assert refused(429, "rate_limit_exceeded") == "rate_limited"
    assert refused(429, "concurrency_limit_exceeded") == refused(400, "request_exceeds_concurrency_limit")
    assert refused(429, "concurrency_limit_exceeded") == "concurrency"
    assert refused(403, "quota_zero") == refused(400, "request_exceeds_tpm_limit") == "quota"
    assert refused(503, "quota_store_unavailable") == "quota_store_unavailable"
    assert refused(429, "queue_full") == "queue_full" and refused(503, "queue_timeout") == "queue_timeout"
    # A client's mistake is no refusal, and neither is an upstream's answer after admission.
    assert refused(400, "invalid_request_error") is None and refused(404, "model_not_found") is None
    assert rejection_reason(Outcome(429, code="rate_limit_exceeded")) is None


async def test_requests_tokens_and_refusals_are_counted_per_configured_tenant(sim):
    config = {
        "access_log": False,
        "auth": keys_auth_config({"sk-acme": "acme", "sk-tight": "tight"}),
        "tenants": {"acme": {}, "tight": {"requests_per_minute": 1}},
        "models": models(sim),
    }
    async with serving(config) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:

            async def chat(key: str, model: str = "m") -> httpx.Response:
                body = {"model": model, "messages": MSG, "max_tokens": 3}
                return await client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})

            answers = [await chat("sk-acme") for _ in range(2)]
            assert [a.status_code for a in answers] == [200, 200]
            assert [(await chat("sk-tight")).status_code for _ in range(2)] == [200, 429]
            assert (await chat("sk-nobody")).status_code == 401
            assert (await chat("sk-acme", "no-such-model")).status_code == 404

        def count(name: str, **labels: str) -> float:
            return served.metric(f"switchyard_tenant_{name}_total", **labels)

        assert count("requests", tenant="acme", model="m", status="200") == 2
        assert count("requests", tenant="acme", model="-", status="404") == 1
        assert count("requests", tenant="tight", model="m", status="429") == 1
        assert count("requests", tenant="other", model="-", status="401") == 1
        prompt = sum(a.json()["usage"]["prompt_tokens"] for a in answers)
        completion = sum(a.json()["usage"]["completion_tokens"] for a in answers)
        assert count("tokens", tenant="acme", model="m", direction="input") == prompt > 0
        assert count("tokens", tenant="acme", model="m", direction="output") == completion > 0
        assert count("rejections", tenant="tight", reason="rate_limited") == 1
        assert count("rejections", tenant="other", reason="auth") == 1
        # A missing model is the client's mistake, not a refusal.
        assert count("rejections", tenant="acme", reason="auth") == 0


async def test_tenants_the_config_does_not_name_share_one_label(sim, tmp_path):
    issuer = Issuer(tmp_path)
    config = {
        "access_log": False,
        "auth": {
            "mode": "keys+jwt",
            "api_keys": [{"sha256": hash_key("sk-acme"), "tenant": "acme"}],
            "jwt": {"issuer": ISS, "audience": AUD, "jwks_file": str(issuer.jwks_path)},
        },
        "models": models(sim),
    }
    async with serving(config) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            body = {"model": "m", "messages": MSG, "max_tokens": 2}
            tokens = [issuer.token(tenant=f"jwt-tenant-{i}") for i in range(3)] + ["sk-acme"]
            for token in tokens:
                response = await client.post(
                    "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"}
                )
                assert response.status_code == 200

        assert served.metric("switchyard_tenant_requests_total", tenant="other", model="m", status="200") == 3
        assert served.metric("switchyard_tenant_requests_total", tenant="acme", model="m", status="200") == 1
        exposed = {
            sample.labels["tenant"]
            for family in served.gateway.metrics.registry.collect()
            if family.name.startswith("switchyard_tenant_")
            for sample in family.samples
        }
        assert exposed == {"acme", "other"}
