"""JWT and API keys through a real gateway process: who gets in, what 401s look
like on the wire, a model outside the caller's list answering as a missing one,
and /v1/models showing only the caller's models."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from policies.auth import hash_key
from tests.policies.jwt_issuer import AUD, ISS, Issuer
from tests.procs import openai_backend_config, start_gateway, start_upstream

API_KEY = "sk-sy-jwt-suite-key"


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jwt")
    issuer = Issuer(tmp)
    upstream = start_upstream(tmp)
    cfg = openai_backend_config(upstream)
    cfg["models"]["other"] = openai_backend_config(upstream, "other", name="up2")["models"]["other"]
    cfg.update(
        {
            "auth": {
                "mode": "keys+jwt",
                "api_keys": [{"sha256": hash_key(API_KEY), "tenant": "acme"}],
                "jwt": {
                    "issuer": ISS,
                    "audience": AUD,
                    "jwks_file": str(issuer.jwks_path),
                    "algorithms": ["RS256", "ES256", "EdDSA"],
                    "leeway_s": 5,
                },
            },
            "tenants": {"acme": {"models": ["m"]}, "globex": {"models": ["*"]}},
            "access_log": False,
        }
    )
    gateway = None
    try:
        gateway = start_gateway(tmp, cfg)
        yield issuer, gateway
    finally:
        if gateway is not None:
            gateway.stop()
        upstream.stop()


def chat(gateway, token: str, model: str = "m") -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        timeout=30,
        headers={"authorization": f"Bearer {token}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )


def assert_401(resp: httpx.Response, says: str) -> None:
    assert resp.status_code == 401, resp.text
    err = resp.json()["error"]
    assert err["type"] == "authentication_error"
    assert says in err["message"]
    assert resp.headers["www-authenticate"].startswith('Bearer realm="switchyard", error="invalid_token"')


@pytest.mark.parametrize("alg,kid", [("RS256", "r1"), ("ES256", "e1"), ("EdDSA", "d1")])
def test_valid_token_is_served(rig, alg, kid):
    issuer, gateway = rig
    assert chat(gateway, issuer.token(alg, kid)).status_code == 200


def test_models_list_and_model_refusals_follow_the_tenant(rig):
    issuer, gateway = rig
    acme, globex = issuer.token(), issuer.token(tenant="globex")

    def listed(tok: str) -> list[str]:
        answer = httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {tok}"})
        return sorted(m["id"] for m in answer.json()["data"])

    assert listed(acme) == ["m"]
    assert listed(globex) == ["m", "other"]
    assert listed(API_KEY) == ["m"]
    denied = chat(gateway, acme, model="other")
    missing = chat(gateway, acme, model="nope")
    assert denied.status_code == missing.status_code == 404
    assert denied.json()["error"] == {
        **missing.json()["error"],
        "message": missing.json()["error"]["message"].replace("nope", "other"),
    }
    assert chat(gateway, globex, model="other").status_code == 200
    claim_narrowed = issuer.token(tenant="globex", models=["m"])
    assert chat(gateway, claim_narrowed, model="other").status_code == 404


def test_no_credentials(rig):
    _, gateway = rig
    r = httpx.get(gateway.url + "/v1/models")
    assert r.status_code == 401 and r.headers["www-authenticate"] == 'Bearer realm="switchyard"'


def test_expired(rig):
    issuer, gateway = rig
    assert_401(chat(gateway, issuer.token(exp=int(time.time()) - 60)), "expired")


def test_wrong_audience(rig):
    issuer, gateway = rig
    assert_401(chat(gateway, issuer.token(aud="not-us")), "audience")


def test_wrong_issuer(rig):
    issuer, gateway = rig
    assert_401(chat(gateway, issuer.token(iss="https://evil.test")), "issuer")


def test_alg_none(rig):
    issuer, gateway = rig
    assert_401(chat(gateway, jwt.encode(issuer.claims(), None, algorithm="none")), "not allowed")


def test_hs256_signed_with_the_public_key(rig):
    issuer, gateway = rig
    assert_401(chat(gateway, issuer.forged_hs256()), "not allowed")


def test_unknown_kid(rig):
    issuer, gateway = rig
    issuer.rsa["stranger"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    try:
        assert_401(chat(gateway, issuer.token(kid="stranger")), "kid")
    finally:
        del issuer.rsa["stranger"]


def test_rotated_key(rig):
    issuer, gateway = rig
    old = issuer.token(kid="r1")
    assert chat(gateway, old).status_code == 200
    issuer.rsa = {"r2": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
    issuer.publish()
    assert chat(gateway, issuer.token(kid="r2")).status_code == 200
    assert_401(chat(gateway, old), "kid")
