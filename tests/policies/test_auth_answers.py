"""What a refused caller is told, word for word (status, `code`, message and the
WWW-Authenticate challenge: the client's contract), and how a credential, a
token's claims and a tenant's table map to a principal. tests/policies/test_auth.py
has the accept/refuse cases; this file pins the answers and the edges."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
import yaml

from adapters.errors import GatewayError
from gateway.config.auth import AuthConfig
from policies.auth import Authenticator, TenantRecord, hash_key, model_allowed, unauthorized
from tests.policies.jwt_issuer import AUD, ISS, Issuer

TENANTS = {"acme": TenantRecord(models=["llama-*", "tiny"], tier=1), "globex": TenantRecord(models=["*"], tier=2)}
NO_KEY = "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' or in the 'api-key' header."


@pytest.fixture
def issuer(tmp_path) -> Issuer:
    return Issuer(tmp_path)


def keys_auth(tenants=TENANTS, mode: str = "keys", **extra) -> Authenticator:
    cfg = {
        "mode": mode,
        "api_keys": [
            {"sha256": hash_key("sk-sy-acme"), "tenant": "acme", "tokens_per_minute": 900, "max_concurrent": 4},
            {"sha256": hash_key("sk-sy.dotted.key"), "tenant": "globex"},
        ],
        **extra,
    }
    return Authenticator(AuthConfig.model_validate(cfg), tenants)


def jwt_auth(issuer: Issuer, mode: str = "jwt", **jwt_extra) -> Authenticator:
    jwt_cfg = {"issuer": ISS, "audience": AUD, "jwks_file": str(issuer.jwks_path)}
    jwt_cfg["algorithms"] = ["RS256", "ES256", "EdDSA"]
    cfg = {"mode": mode, "jwt": jwt_cfg | jwt_extra}
    if "keys" in mode:
        cfg["api_keys"] = [{"sha256": hash_key("sk-sy.dotted.key"), "tenant": "globex"}]
    return Authenticator(AuthConfig.model_validate(cfg), TENANTS)


async def refused(auth: Authenticator, headers: dict) -> GatewayError:
    with pytest.raises(GatewayError) as exc:
        await auth.authenticate(headers)
    return exc.value


def b64(obj) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def bearer(token: str) -> dict:
    return {"authorization": f"Bearer {token}"}


def challenge(message: str, error: str = "invalid_token") -> str:
    return f'Bearer realm="switchyard", error="{error}", error_description="{message}"'


async def assert_token_refused(auth: Authenticator, token: str, message: str) -> None:
    e = await refused(auth, bearer(token))
    assert (e.status, e.code, e.message) == (401, "invalid_token", message)
    assert e.headers["WWW-Authenticate"] == challenge(message)


# ---- API keys: the answers ---------------------------------------------------------------


async def test_no_credential_is_asked_for_without_an_error_attribute():
    for headers in ({}, {"authorization": "Basic dXNlcjpwdw=="}, {"authorization": "Bearer "}, {"api-key": "  "}):
        e = await refused(keys_auth(), headers)
        assert (e.status, e.code, e.message) == (401, "invalid_api_key", NO_KEY), headers
        assert e.headers == {"WWW-Authenticate": 'Bearer realm="switchyard"'}


async def test_a_wrong_key_is_named_only_by_its_ends():
    e = await refused(keys_auth(), bearer("sk-sy-wrong-but-long"))
    assert (e.status, e.code, e.message) == (401, "invalid_api_key", "Incorrect API key provided: sk-sy-***long.")
    assert e.headers["WWW-Authenticate"] == challenge("Incorrect API key provided: sk-sy-***long.")
    # 14 characters or fewer: nothing of it is shown; 15: its ends are.
    assert (await refused(keys_auth(), bearer("x" * 14))).message == "Incorrect API key provided: ***."
    assert (
        await refused(keys_auth(), bearer("abcdef12345wxyz"))
    ).message == "Incorrect API key provided: abcdef***wxyz."


def test_a_challenge_never_carries_a_double_quote():
    e = unauthorized('the claim "org" is missing')
    assert e.headers["WWW-Authenticate"] == challenge("the claim 'org' is missing")
    assert e.message == 'the claim "org" is missing'  # the body keeps the text as it is


async def test_two_credentials_are_an_invalid_request():
    e = await refused(keys_auth(), {"authorization": "Bearer sk-sy-acme", "api-key": "sk-sy-acme"})
    message = "Send exactly one credential: one 'Authorization: Bearer <key>' header or one 'api-key' header."
    assert (e.status, e.code, e.message) == (401, "invalid_request", message)
    assert e.headers["WWW-Authenticate"] == challenge(message, "invalid_request")


async def test_a_bearer_value_is_read_past_extra_spaces():
    assert (await keys_auth().authenticate({"authorization": "  Bearer   sk-sy-acme "})).tenant == "acme"
    assert (await keys_auth().authenticate({"authorization": "bearer sk-sy-acme"})).tenant == "acme"


async def test_a_key_carries_all_its_limits():
    p = await keys_auth().authenticate({"api-key": "sk-sy-acme"})
    assert (p.key_requests_per_minute, p.key_tokens_per_minute, p.key_max_concurrent) == (None, 900, 4)
    assert (p.models, p.tier, p.key_id) == (["llama-*", "tiny"], 1, hash_key("sk-sy-acme")[:12])


async def test_an_unknown_tenant_is_403_naming_it():
    auth = keys_auth({"globex": TENANTS["globex"]})
    e = await refused(auth, {"api-key": "sk-sy-acme"})
    assert (e.status, e.code, e.message) == (403, "unknown_tenant", "Tenant 'acme' is not configured on this gateway.")


async def test_without_tenants_a_key_may_use_every_model_at_tier_one(tmp_path):
    p = await keys_auth({}).authenticate({"api-key": "sk-sy-acme"})
    assert (p.tenant, p.models, p.tier) == ("acme", ["*"], 1)
    # And the key file's keys may name any tenant; with tenants, one naming an unknown
    # tenant is left out (not let in to fail later).
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump([{"sha256": hash_key("sk-sy-file"), "tenant": "initech"}]))
    open_auth = keys_auth({}, api_keys_file=str(path))
    await open_auth.start()
    assert (await open_auth.authenticate({"api-key": "sk-sy-file"})).tenant == "initech"
    closed = keys_auth(api_keys_file=str(path))
    await closed.start()
    e = await refused(closed, {"api-key": "sk-sy-file"})
    assert (e.status, e.code) == (401, "invalid_api_key")


async def test_mode_none_takes_the_anonymous_tenants_models_and_tier():
    cfg = AuthConfig.model_validate({"mode": "none"})
    p = await Authenticator(cfg, {"anonymous": TenantRecord(models=["tiny"], tier=3)}).authenticate({})
    assert (p.tenant, p.key_id, p.models, p.tier) == ("anonymous", None, ["tiny"], 3)
    p = await Authenticator(cfg, {"acme": TenantRecord(models=["tiny"], tier=3)}).authenticate({})
    assert (p.models, p.tier) == (["*"], 1)


def test_model_patterns():
    assert model_allowed(["*"], "anything") and model_allowed(["tiny"], "tiny")
    assert model_allowed(["llama-*"], "llama-3") and not model_allowed(["llama-*"], "tiny")
    assert not model_allowed([], "tiny") and not model_allowed(["tin"], "tiny")


# ---- JWTs: the answers ----------------------------------------------------------------------


async def test_each_refused_token_gets_its_own_answer(issuer):
    auth = jwt_auth(issuer)
    await auth.start()
    now = int(time.time())
    issuer.rsa["r9"] = issuer.rsa["r1"]  # signs, but was never published
    head, body, sig = issuer.token().split(".")
    cases = [
        ("not-a-jwt", "The bearer token is not a valid JWT."),
        (issuer.token(kid="r9"), "The JWT's signing key (kid) is not known."),
        (issuer.token(exp=now - 120), "The JWT has expired."),
        (issuer.token(nbf=now + 600), "The JWT is not valid yet (nbf)."),
        (issuer.token(aud="someone-else"), "The JWT's audience is not this gateway."),
        (issuer.token(iss="https://evil.test"), "The JWT's issuer is not trusted."),
        (f"{head}.{b64(issuer.claims(iss=[ISS]))}.{sig}", "The JWT's issuer is not trusted."),  # iss not a string
        (issuer.token(exp=None), "The JWT was rejected: MissingRequiredClaimError."),
        (f"{head}.{body}.{sig[:-4]}AAAA", "The JWT was rejected: InvalidSignatureError."),
        (f"eyJhbGciOiJub25lIn0.{body}.", "JWT algorithm 'none' is not allowed for this issuer."),  # {"alg":"none"}
        (issuer.token(exp=str(now + 300)), "The JWT's 'exp' claim must be a JSON number (RFC 7519 NumericDate)."),
        (issuer.token(tenant=None), "The JWT has no 'tenant' claim naming a tenant."),
        (issuer.token(tenant=""), "The JWT has no 'tenant' claim naming a tenant."),
        (issuer.token(tenant=7), "The JWT has no 'tenant' claim naming a tenant."),
    ]
    for token, message in cases:
        await assert_token_refused(auth, token, message)
    e = await refused(auth, bearer(issuer.token(tenant="initech")))
    assert (e.status, e.code, e.message) == (
        403,
        "unknown_tenant",
        "Tenant 'initech' is not configured on this gateway.",
    )


async def test_the_verifier_alone_checks_the_header_and_the_issuer(issuer):
    # The verifier is chosen by the token's issuer, so these checks cannot be reached
    # through the authenticator; the verifier must still make them itself.
    auth = jwt_auth(issuer)
    await auth.start()
    verifier = auth.issuers[ISS]
    for token, message in [
        ("not-a-jwt", "The bearer token is not a valid JWT."),
        (issuer.token(iss="https://evil.test"), "The JWT's issuer is not trusted."),
    ]:
        with pytest.raises(GatewayError) as exc:
            await verifier.verify(token)
        assert (exc.value.code, exc.value.message) == ("invalid_token", message)


async def test_a_key_published_for_another_algorithm_is_refused(issuer):
    # Same key type (RSA), but its JWK says RS384: a token saying RS256 must not be
    # verified with it, even though the signature itself would check out.
    jwks = json.loads(issuer.jwks_path.read_text())
    r1 = next(k for k in jwks["keys"] if k["kid"] == "r1")
    jwks["keys"].append(r1 | {"kid": "r384", "alg": "RS384"})
    issuer.jwks_path.write_text(json.dumps(jwks))
    auth = jwt_auth(issuer)
    await auth.start()
    issuer.rsa["r384"] = issuer.rsa["r1"]
    await assert_token_refused(auth, issuer.token(kid="r384"), "The JWT's key does not match algorithm RS256.")
    await assert_token_refused(auth, issuer.token("ES256", "r1"), "The JWT's key does not match algorithm ES256.")


async def test_claims_map_to_models_and_tier_with_the_tenants_as_fallback(issuer):
    auth = jwt_auth(issuer)
    await auth.start()

    async def principal(**claims):
        return await auth.authenticate(bearer(issuer.token(**claims)))

    assert (await principal(models="tiny llama-3")).models == ["tiny", "llama-3"]  # a scope-like string
    assert (await principal(models=["tiny", 5])).models == ["llama-*", "tiny"]  # unreadable: the tenant's
    assert (await principal(models=7)).models == ["llama-*", "tiny"]
    assert (await principal(tier=4)).tier == 4
    assert (await principal(tier=True)).tier == 1 and (await principal(tier="4")).tier == 1
    wide = await principal(models=["*"])
    assert auth.may_use(wide, "tiny") and not auth.may_use(wide, "gpt-4")  # the token never widens the tenant


async def test_in_keys_and_jwt_mode_a_key_with_two_dots_is_still_a_key(issuer):
    auth = jwt_auth(issuer, mode="keys+jwt")
    await auth.start()
    assert (await auth.authenticate(bearer("sk-sy.dotted.key"))).tenant == "globex"
    assert (await auth.authenticate(bearer(issuer.token()))).tenant == "acme"


async def test_a_token_without_kid_needs_a_key_set_of_one(issuer, tmp_path):
    import jwt as pyjwt

    claims = issuer.claims()
    no_kid = pyjwt.encode(claims, issuer.rsa["r1"], algorithm="RS256")
    auth = jwt_auth(issuer)
    await auth.start()
    await assert_token_refused(auth, no_kid, "The JWT's signing key (kid) is not known.")  # three keys: ambiguous
    jwks = json.loads(issuer.jwks_path.read_text())
    single = tmp_path / "single.json"
    single.write_text(json.dumps({"keys": [k for k in jwks["keys"] if k["kid"] == "r1"]}))
    one = Authenticator(
        AuthConfig.model_validate({"mode": "jwt", "jwt": {"issuer": ISS, "audience": AUD, "jwks_file": str(single)}}),
        TENANTS,
    )
    await one.start()
    assert (await one.authenticate(bearer(no_kid))).tenant == "acme"


def hs_only(tmp_path: Path) -> AuthConfig:
    (tmp_path / "hs").write_bytes(b"a-real-shared-secret-of-32-bytes!")
    jwt_cfg = {"issuer": ISS, "audience": AUD, "algorithms": ["HS256"], "hs256_secret_file": str(tmp_path / "hs")}
    return AuthConfig.model_validate({"mode": "jwt", "jwt": jwt_cfg})


async def test_an_hs256_only_issuer_has_no_key_set_to_fetch(tmp_path, issuer, caplog):
    import jwt as pyjwt

    auth = Authenticator(hs_only(tmp_path), TENANTS)
    await auth.start()
    assert auth.issuers[ISS].jwks is None and not [r for r in caplog.records if r.levelname == "ERROR"]
    good = pyjwt.encode(issuer.claims(), b"a-real-shared-secret-of-32-bytes!", algorithm="HS256")
    assert (await auth.authenticate(bearer(good))).tenant == "acme"


async def test_an_hs256_secret_is_read_as_bytes_not_text(tmp_path, issuer):
    import jwt as pyjwt

    secret = bytes(range(200, 232))  # 32 bytes that are not UTF-8
    (tmp_path / "hs").write_bytes(secret + b"\n")  # the trailing newline of a mounted file is not part of it
    jwt_cfg = {"issuer": ISS, "audience": AUD, "algorithms": ["HS256"], "hs256_secret_file": str(tmp_path / "hs")}
    auth = Authenticator(AuthConfig.model_validate({"mode": "jwt", "jwt": jwt_cfg}), TENANTS)
    good = pyjwt.encode(issuer.claims(), secret, algorithm="HS256")
    assert (await auth.authenticate(bearer(good))).tenant == "acme"
