"""API keys and JWTs: what is accepted, what is refused, and how a caller is
mapped to a tenant, its models and its tier."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from adapters.errors import GatewayError
from gateway.config.auth import AuthConfig
from policies.auth import Authenticator, TenantRecord, credential_headers, generate_key, hash_key
from tests.policies.jwt_issuer import AUD, ISS, Issuer
from tests.served_app import served

TENANTS = {"acme": TenantRecord(models=["llama-*", "tiny"], tier=1), "globex": TenantRecord(models=["*"], tier=2)}


@pytest.fixture
def issuer(tmp_path) -> Issuer:
    return Issuer(tmp_path)


def jwt_auth(
    issuer: Issuer,
    tmp_path: Path,
    algorithms=("RS256", "ES256", "EdDSA"),
    secret: bytes | None = None,
    mode: str = "jwt",
) -> Authenticator:
    jwt_cfg = {
        "issuer": ISS,
        "audience": AUD,
        "jwks_file": str(issuer.jwks_path),
        "algorithms": list(algorithms),
        "leeway_s": 30,
    }
    if secret is not None:
        (tmp_path / "hs").write_bytes(secret)
        jwt_cfg["hs256_secret_file"] = str(tmp_path / "hs")
    cfg = {"mode": mode, "jwt": jwt_cfg}
    if "keys" in mode:
        cfg["api_keys"] = [{"sha256": hash_key("sk-sy-known"), "tenant": "acme"}]
    return Authenticator(AuthConfig.model_validate(cfg), TENANTS)


async def rejected(auth: Authenticator, token: str) -> GatewayError:
    with pytest.raises(GatewayError) as exc:
        await auth.authenticate({"authorization": f"Bearer {token}"})
    assert exc.value.status == 401
    assert exc.value.headers["WWW-Authenticate"].startswith('Bearer realm="switchyard"')
    assert 'error="invalid_token"' in exc.value.headers["WWW-Authenticate"]
    return exc.value


# ---- API keys ---------------------------------------------------------------


def keys_auth(tmp_path: Path | None = None, file_entries: list | None = None) -> Authenticator:
    cfg = {
        "mode": "keys",
        "api_keys": [
            {"sha256": hash_key("sk-sy-acme"), "tenant": "acme", "name": "ci"},
            {
                "sha256": hash_key("sk-sy-narrow"),
                "tenant": "acme",
                "models": ["tiny"],
                "tier": 3,
                "requests_per_minute": 5,
            },
        ],
    }
    if file_entries is not None:
        path = tmp_path / "keys.yaml"
        import yaml

        path.write_text(yaml.safe_dump(file_entries))
        cfg["api_keys_file"] = str(path)
    return Authenticator(AuthConfig.model_validate(cfg), TENANTS)


async def test_key_in_bearer_or_api_key_header_maps_to_tenant():
    auth = keys_auth()
    p = await auth.authenticate({"authorization": "Bearer sk-sy-acme"})
    assert (p.tenant, p.key_id, p.tier) == ("acme", "ci", 1)
    p2 = await auth.authenticate({"api-key": "sk-sy-acme"})
    assert p2.tenant == "acme"


async def test_wrong_key_is_401_with_challenge_and_no_echo():
    auth = keys_auth()
    with pytest.raises(GatewayError) as exc:
        await auth.authenticate({"authorization": "Bearer sk-sy-wrong-but-long-key-value"})
    e = exc.value
    assert e.status == 401 and e.code == "invalid_api_key"
    assert "sk-sy-wrong-but-long-key-value" not in e.message
    assert 'error="invalid_token"' in e.headers["WWW-Authenticate"]


async def test_missing_credentials_is_401_without_error_attribute():
    with pytest.raises(GatewayError) as exc:
        await keys_auth().authenticate({})
    assert exc.value.status == 401
    assert exc.value.headers["WWW-Authenticate"] == 'Bearer realm="switchyard"'


async def test_key_narrows_models_and_carries_its_limits():
    auth = keys_auth()
    p = await auth.authenticate({"api-key": "sk-sy-narrow"})
    assert p.tier == 3 and p.key_requests_per_minute == 5
    assert auth.may_use(p, "tiny") and not auth.may_use(p, "llama-3-8b")
    wide = await auth.authenticate({"api-key": "sk-sy-acme"})
    assert auth.may_use(wide, "llama-3-8b") and not auth.may_use(wide, "gpt-4")


async def test_mounted_key_file_is_read_and_reread_when_rotated(tmp_path):
    auth = keys_auth(tmp_path, [{"sha256": hash_key("sk-sy-file-1"), "tenant": "globex"}])
    auth.keys._recheck_s = 0
    await auth.start()
    assert (await auth.authenticate({"api-key": "sk-sy-file-1"})).tenant == "globex"
    path = tmp_path / "keys.yaml"
    import yaml

    path.write_text(yaml.safe_dump([{"sha256": hash_key("sk-sy-file-2"), "tenant": "globex"}]))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert (await auth.authenticate({"api-key": "sk-sy-file-2"})).tenant == "globex"
    with pytest.raises(GatewayError):
        await auth.authenticate({"api-key": "sk-sy-file-1"})


async def test_generated_keys_are_unique_and_hash_to_hex():
    a, b = generate_key(), generate_key()
    assert a != b and a.startswith("sk-sy-") and len(a) > 40
    assert len(hash_key(a)) == 64


async def test_mode_none_is_anonymous_with_every_model():
    auth = Authenticator(AuthConfig.model_validate({"mode": "none"}), {})
    p = await auth.authenticate({})
    assert p.tenant == "anonymous" and auth.may_use(p, "anything")


# ---- JWT --------------------------------------------------------------------


@pytest.mark.parametrize("alg,kid", [("RS256", "r1"), ("ES256", "e1"), ("EdDSA", "d1")])
async def test_valid_tokens_of_each_allowed_algorithm(issuer, tmp_path, alg, kid):
    auth = jwt_auth(issuer, tmp_path)
    await auth.start()
    p = await auth.authenticate({"authorization": f"Bearer {issuer.token(alg, kid, tier=2, models=['tiny'])}"})
    assert (p.tenant, p.tier, p.models) == ("acme", 2, ["tiny"])
    assert p.claims["sub"] == "u1"
    assert auth.may_use(p, "tiny") and not auth.may_use(p, "llama-3")


async def test_expired_token(issuer, tmp_path):
    auth = jwt_auth(issuer, tmp_path)
    e = await rejected(auth, issuer.token(exp=int(time.time()) - 120))
    assert "expired" in e.message


async def test_expiry_within_leeway_is_accepted(issuer, tmp_path):
    auth = jwt_auth(issuer, tmp_path)
    p = await auth.authenticate({"authorization": f"Bearer {issuer.token(exp=int(time.time()) - 10)}"})
    assert p.tenant == "acme"


async def test_not_yet_valid_token(issuer, tmp_path):
    await rejected(jwt_auth(issuer, tmp_path), issuer.token(nbf=int(time.time()) + 600))


async def test_wrong_audience(issuer, tmp_path):
    e = await rejected(jwt_auth(issuer, tmp_path), issuer.token(aud="someone-else"))
    assert "audience" in e.message


async def test_wrong_issuer(issuer, tmp_path):
    e = await rejected(jwt_auth(issuer, tmp_path), issuer.token(iss="https://evil.test"))
    assert "issuer" in e.message


async def test_token_without_exp_is_refused(issuer, tmp_path):
    await rejected(jwt_auth(issuer, tmp_path), issuer.token(exp=None))


async def test_alg_none_is_refused(issuer, tmp_path):
    unsigned = jwt.encode(issuer.claims(), None, algorithm="none")
    e = await rejected(jwt_auth(issuer, tmp_path), unsigned)
    assert "not allowed" in e.message


async def test_hs256_signed_with_the_rsa_public_key_is_refused(issuer, tmp_path):
    forged = issuer.forged_hs256()
    # RS256-only issuer: HS256 is not on the allow-list.
    await rejected(jwt_auth(issuer, tmp_path), forged)
    # An issuer that also allows HS256 verifies with its own secret, never the public key.
    both = jwt_auth(issuer, tmp_path, algorithms=("RS256", "HS256"), secret=b"a-real-shared-secret-of-32-bytes!")
    await rejected(both, forged)
    good = jwt.encode(issuer.claims(), b"a-real-shared-secret-of-32-bytes!", algorithm="HS256")
    assert (await both.authenticate({"authorization": f"Bearer {good}"})).tenant == "acme"


async def test_rs256_header_on_an_ec_key_is_refused(issuer, tmp_path):
    token = jwt.encode(issuer.claims(), issuer.ec, algorithm="ES256", headers={"kid": "e1"})
    head, body, sig = token.split(".")
    import base64

    swapped = base64.urlsafe_b64encode(json.dumps({"alg": "RS256", "kid": "e1"}).encode()).rstrip(b"=").decode()
    await rejected(jwt_auth(issuer, tmp_path), f"{swapped}.{body}.{sig}")


async def test_unknown_kid(issuer, tmp_path):
    auth = jwt_auth(issuer, tmp_path)
    await auth.start()
    issuer.rsa["r9"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # never published
    e = await rejected(auth, issuer.token(kid="r9"))
    assert "kid" in e.message


async def test_rotated_key_is_picked_up_and_the_retired_one_refused(issuer, tmp_path):
    auth = jwt_auth(issuer, tmp_path)
    await auth.start()
    old = issuer.token(kid="r1")
    assert (await auth.authenticate({"authorization": f"Bearer {old}"})).tenant == "acme"
    issuer.rsa = {"r2": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
    issuer.publish()
    assert (await auth.authenticate({"authorization": f"Bearer {issuer.token(kid='r2')}"})).tenant == "acme"
    await rejected(auth, old)


async def test_tampered_signature(issuer, tmp_path):
    head, body, sig = issuer.token().split(".")
    await rejected(jwt_auth(issuer, tmp_path), f"{head}.{body}.{sig[:-4]}AAAA")


async def test_unknown_tenant_claim_is_403(issuer, tmp_path):
    with pytest.raises(GatewayError) as exc:
        await jwt_auth(issuer, tmp_path).authenticate({"authorization": f"Bearer {issuer.token(tenant='initech')}"})
    assert exc.value.status == 403


async def test_keys_and_jwt_mode_accepts_both(issuer, tmp_path):
    auth = jwt_auth(issuer, tmp_path, mode="keys+jwt")
    assert (await auth.authenticate({"authorization": "Bearer sk-sy-known"})).tenant == "acme"
    p = await auth.authenticate({"authorization": f"Bearer {issuer.token(tenant='globex')}"})
    assert p.tenant == "globex" and p.tier == 2


async def test_each_issuer_has_its_own_allow_list(issuer, tmp_path):
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = Issuer(other_dir)
    cfg = {
        "mode": "jwt",
        "jwt": {"issuer": ISS, "audience": AUD, "jwks_file": str(issuer.jwks_path), "algorithms": ["RS256"]},
        "jwt_issuers": [
            {
                "issuer": "https://other.test",
                "audience": AUD,
                "jwks_file": str(other.jwks_path),
                "algorithms": ["ES256"],
            }
        ],
    }
    auth = Authenticator(AuthConfig.model_validate(cfg), TENANTS)
    await auth.start()
    from_other = other.token("ES256", "e1", iss="https://other.test", tenant="globex")
    assert (await auth.authenticate({"authorization": f"Bearer {from_other}"})).tenant == "globex"
    # RS256 is allowed for the first issuer only, even with a key the second one publishes.
    await rejected(auth, other.token("RS256", "r1", iss="https://other.test"))
    await rejected(auth, issuer.token("ES256", "e1"))
    e = await rejected(auth, issuer.token(iss="https://stranger.test"))
    assert "issuer" in e.message


async def test_jwks_from_a_url_is_cached_and_refetched_for_a_new_kid(issuer, tmp_path):
    from aiohttp import web

    fetches = []

    async def jwks(request: web.Request) -> web.Response:
        fetches.append(time.monotonic())
        return web.Response(body=issuer.jwks_path.read_bytes(), content_type="application/json")

    app = web.Application()
    app.router.add_get("/jwks.json", jwks)
    async with served(app) as url:
        cfg = {
            "mode": "jwt",
            "jwt": {
                "issuer": ISS,
                "audience": AUD,
                "algorithms": ["RS256"],
                "jwks_url": f"{url}/jwks.json",
                "jwks_cache_s": 300,
            },
        }
        auth = Authenticator(AuthConfig.model_validate(cfg), TENANTS)
        await auth.start()
        for _ in range(3):
            assert (await auth.authenticate({"authorization": f"Bearer {issuer.token()}"})).tenant == "acme"
        assert len(fetches) == 1  # cached
        auth.issuers[ISS].jwks.min_refresh_s = 0
        issuer.rsa["r2"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        issuer.publish()
        assert (await auth.authenticate({"authorization": f"Bearer {issuer.token(kid='r2')}"})).tenant == "acme"
        assert len(fetches) == 2  # the unknown kid made it look again


async def test_concurrent_cache_misses_fetch_the_jwks_once(issuer, tmp_path):
    import asyncio

    auth = jwt_auth(issuer, tmp_path)
    await auth.start()
    keys = auth.issuers[ISS].jwks
    reads = 0
    real_read = keys._read

    async def counting_read():
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.05)  # a slow IdP: everyone arrives while the first fetch runs
        return await real_read()

    keys._read = counting_read
    keys.cache_s = 0  # every request finds the cache expired
    token = issuer.token()
    results = await asyncio.gather(*(auth.authenticate({"authorization": f"Bearer {token}"}) for _ in range(20)))
    assert all(p.tenant == "acme" for p in results)
    assert reads == 1


# ---- one credential, one rule -------------------------------------------------


async def test_two_credentials_are_refused_whichever_headers_carry_them():
    auth = keys_auth()
    for headers in (
        [(b"authorization", b"Bearer sk-sy-acme"), (b"authorization", b"Bearer sk-sy-narrow")],
        [(b"api-key", b"sk-sy-acme"), (b"api-key", b"sk-sy-acme")],
        [(b"authorization", b"Bearer sk-sy-acme"), (b"api-key", b"sk-sy-narrow")],
    ):
        with pytest.raises(GatewayError) as exc:
            await auth.authenticate(credential_headers(headers))
        assert exc.value.status == 401 and 'error="invalid_request"' in exc.value.headers["WWW-Authenticate"]
    one = credential_headers([(b"content-type", b"application/json"), (b"authorization", b"Bearer sk-sy-acme")])
    assert one == {"authorization": "Bearer sk-sy-acme"}
    assert (await auth.authenticate(one)).tenant == "acme"


# ---- a broken key file --------------------------------------------------------


def rotate(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()  # mtime granularity can hide a rewrite within the same tick
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize(
    "broken",
    [
        "- {sha256: [unclosed",  # not YAML
        "just a string",
        "- 42",
        "- {tenant: globex}",  # no digest
        "- {sha256: nothex, tenant: globex}",
        f"- {{sha256: {hash_key('sk-sy-x')}, tenant: globex, tier: high}}",
        f"- {{sha256: {hash_key('sk-sy-x')}, tenant: globex, models: tiny}}",
    ],
)
async def test_a_broken_key_file_keeps_the_last_good_keys_and_is_counted_once(tmp_path, broken, caplog):
    auth = keys_auth(tmp_path, [{"sha256": hash_key("sk-sy-file-1"), "tenant": "globex"}])
    auth.keys._recheck_s = 0
    await auth.start()
    path = tmp_path / "keys.yaml"
    rotate(path, broken)
    for _ in range(3):
        assert (await auth.authenticate({"api-key": "sk-sy-file-1"})).tenant == "globex"
        assert (await auth.authenticate({"api-key": "sk-sy-acme"})).tenant == "acme"  # the config's keys too
    assert auth.keys.reload_errors == 1
    assert sum("api_keys_file" in r.getMessage() for r in caplog.records if r.levelname == "ERROR") == 1
    rotate(path, f"- {{sha256: {hash_key('sk-sy-file-2')}, tenant: globex}}")
    assert (await auth.authenticate({"api-key": "sk-sy-file-2"})).tenant == "globex"
    rotate(path, broken)
    await auth.authenticate({"api-key": "sk-sy-file-2"})
    assert auth.keys.reload_errors == 2


async def test_a_key_file_broken_from_the_start_leaves_the_config_keys_serving(tmp_path):
    auth = keys_auth(tmp_path, [])
    rotate(tmp_path / "keys.yaml", "- {sha256: [unclosed")
    await auth.start()
    assert (await auth.authenticate({"api-key": "sk-sy-acme"})).tenant == "acme"
    assert auth.keys.reload_errors == 1


# ---- NumericDate ----------------------------------------------------------------


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
async def test_time_claims_must_be_json_numbers(issuer, tmp_path, claim):
    auth = jwt_auth(issuer, tmp_path)
    now = int(time.time())
    value = {"exp": now + 300, "nbf": now - 10, "iat": now}[claim]
    accepted = await auth.authenticate({"authorization": f"Bearer {issuer.token(**{claim: value})}"})
    assert accepted.tenant == "acme"
    e = await rejected(auth, issuer.token(**{claim: str(value)}))
    assert claim in e.message and "number" in e.message
    await rejected(auth, issuer.token(**{claim: True}))
