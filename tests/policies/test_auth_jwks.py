"""The JWKS key set of one issuer: loaded at start and not on the first request,
cached, re-read when its file changes and not otherwise, an unknown kid refreshing
at most once per interval (and once for many concurrent requests), keys not meant
for signatures or unreadable skipped, and a failed fetch (bad file, slow URL)
logged while the keys already held keep serving."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from adapters.errors import GatewayError
from gateway.config.auth import AuthConfig
from policies.auth import Authenticator, TenantRecord
from tests.policies.jwt_issuer import AUD, ISS, Issuer
from tests.served_app import served

TENANTS = {"acme": TenantRecord(models=["*"], tier=1)}


@pytest.fixture
def issuer(tmp_path) -> Issuer:
    return Issuer(tmp_path)


def auth_for(jwks: dict) -> Authenticator:
    cfg = {"mode": "jwt", "jwt": {"issuer": ISS, "audience": AUD, "algorithms": ["RS256", "ES256"], **jwks}}
    return Authenticator(AuthConfig.model_validate(cfg), TENANTS)


def counting(auth: Authenticator, delay: float = 0.0) -> list[float]:
    """Count the key set's reads from now on (optionally slowed, like a slow IdP)."""
    keys = auth.issuers[ISS].jwks
    assert keys is not None
    reads: list[float] = []
    real = keys._read

    async def read():
        reads.append(time.monotonic())
        await asyncio.sleep(delay)
        return await real()

    keys._read = read  # type: ignore[method-assign]
    return reads


async def accepted(auth: Authenticator, token: str) -> bool:
    try:
        await auth.authenticate({"authorization": f"Bearer {token}"})
    except GatewayError as e:
        assert e.message == "The JWT's signing key (kid) is not known.", e.message
        return False
    return True


def errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


async def test_the_keys_are_read_at_start_and_kept_while_the_file_is_unchanged(issuer):
    auth = auth_for({"jwks_file": str(issuer.jwks_path)})
    await auth.start()
    reads = counting(auth)
    for _ in range(3):
        assert await accepted(auth, issuer.token())
    assert reads == []
    issuer.publish()  # a new mtime: read again, once
    assert await accepted(auth, issuer.token())
    assert await accepted(auth, issuer.token())
    assert len(reads) == 1


async def test_an_unknown_kid_refreshes_at_most_once_per_interval(issuer):
    auth = auth_for({"jwks_file": str(issuer.jwks_path)})
    await auth.start()
    reads = counting(auth)
    issuer.rsa["r9"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # never published
    for _ in range(3):
        assert not await accepted(auth, issuer.token(kid="r9"))
    assert reads == []  # just loaded: an unknown kid does not make it look again yet
    auth.issuers[ISS].jwks.min_refresh_s = 0
    assert not await accepted(auth, issuer.token(kid="r9"))
    assert len(reads) == 1


async def test_concurrent_requests_with_a_new_kid_fetch_once(issuer, tmp_path):
    # A copy of the key set that the issuer's rotation does not rewrite: the mtime
    # stays, so only the unknown-kid path can refresh it.
    path = tmp_path / "pinned.json"
    path.write_text(issuer.jwks_path.read_text())
    auth = auth_for({"jwks_file": str(path)})
    await auth.start()
    auth.issuers[ISS].jwks.min_refresh_s = 0
    reads = counting(auth, delay=0.05)
    issuer.rsa["r2"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = issuer.token(kid="r2")
    results = await asyncio.gather(*(accepted(auth, token) for _ in range(10)))
    assert results == [False] * 10 and len(reads) == 1


async def test_keys_not_for_signatures_or_unreadable_are_skipped_and_the_rest_kept(issuer, tmp_path, caplog):
    jwks = json.loads(issuer.jwks_path.read_text())
    r1 = next(k for k in jwks["keys"] if k["kid"] == "r1")
    others = [k for k in jwks["keys"] if k["kid"] != "r1"]
    path = tmp_path / "mixed.json"
    keys = [r1 | {"use": "enc"}, {"kty": "XYZ", "kid": "bad"}, *others]  # the skipped ones first
    path.write_text(json.dumps({"keys": keys}))
    auth = auth_for({"jwks_file": str(path)})
    with caplog.at_level(logging.ERROR, "switchyard.auth"):
        await auth.start()
    assert not await accepted(auth, issuer.token(kid="r1"))  # an encryption key never verifies
    assert await accepted(auth, issuer.token("ES256", "e1"))  # the keys after them were read
    (logged,) = errors(caplog)
    assert logged == "JWKS key bad skipped: Unsupported kty: XYZ"


@pytest.mark.parametrize("content", ["{not json", "{}", '{"keys": []}'])
async def test_a_key_set_without_keys_refuses_every_token_and_says_why(issuer, tmp_path, caplog, content):
    path = tmp_path / "broken.json"
    path.write_text(content)
    auth = auth_for({"jwks_file": str(path)})
    with caplog.at_level(logging.ERROR, "switchyard.auth"):
        await auth.start()
        assert not await accepted(auth, issuer.token())
        assert not await accepted(auth, issuer.token())
    if content == "{not json":
        assert errors(caplog)[0].startswith(f"JWKS refresh from {path} failed: Expecting property name")
    else:
        assert errors(caplog) == []


async def test_keys_already_held_keep_serving_when_the_file_goes_away(issuer, caplog):
    auth = auth_for({"jwks_file": str(issuer.jwks_path)})
    await auth.start()
    issuer.jwks_path.unlink()
    with caplog.at_level(logging.ERROR, "switchyard.auth"):
        for _ in range(3):
            assert await accepted(auth, issuer.token())
    assert errors(caplog) == []  # a file that is gone is not a change to read


async def test_a_slow_jwks_url_is_given_up_after_the_fetch_timeout(issuer, caplog):
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(3)
        return web.Response(body=issuer.jwks_path.read_bytes(), content_type="application/json")

    app = web.Application()
    app.router.add_get("/jwks.json", slow)
    async with served(app) as url:
        auth = auth_for({"jwks_url": f"{url}/jwks.json"})
        auth.issuers[ISS].jwks.fetch_timeout_s = 0.2
        t0 = time.monotonic()
        with caplog.at_level(logging.ERROR, "switchyard.auth"):
            await auth.start()
        # The fetch gave up: without its timeout the slow answer (3 s) would have arrived
        # and been accepted, with nothing logged. Not before the timeout; no ceiling.
        assert time.monotonic() - t0 >= 0.2
        assert errors(caplog)[0].startswith(f"JWKS refresh from {url}/jwks.json failed: ")
        assert not await accepted(auth, issuer.token())
