"""Who is calling: API keys (policies/api_keys.py: stored only as SHA-256 digests)
and JWTs (PyJWT, per-issuer algorithm allow-list, keys from a JWKS file or URL),
mapped to a `Principal`: the tenant, the models it may use, and its priority tier.

Failures are 401 with OpenAI's envelope and a `WWW-Authenticate` header
(RFC 6750). The messages never echo a full key or token.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt

from adapters.errors import GatewayError
from policies.api_keys import KEY_PREFIX, ApiKeyTable, KeyRecord, generate_key, hash_key, key_record

__all__ = [
    "KEY_PREFIX",
    "ApiKeyTable",
    "Authenticator",
    "KeyRecord",
    "Principal",
    "TenantRecord",
    "credential_headers",
    "generate_key",
    "hash_key",
    "key_record",
]

log = logging.getLogger("switchyard.auth")

ANONYMOUS_TENANT = "anonymous"
REALM = "switchyard"

# The key type each algorithm must be verified with. Checking it ourselves (not
# only trusting the library) is what stops algorithm confusion: an RS256 public
# key can never be fed to HS256 as a shared secret, and `none` is never allowed.
ALG_KEY_TYPES = {"RS256": "RSA", "ES256": "EC", "EdDSA": "OKP", "HS256": "oct"}
TIME_CLAIMS = ("exp", "nbf", "iat")


@dataclass(slots=True)
class Principal:
    tenant: str
    key_id: str | None
    models: list[str]  # fnmatch patterns; "*" is every model
    tier: int
    claims: dict[str, Any] = field(default_factory=dict)
    # Per-key limits (None = only the tenant's apply).
    key_requests_per_minute: int | None = None
    key_tokens_per_minute: int | None = None
    key_max_concurrent: int | None = None


@dataclass(frozen=True, slots=True)
class TenantRecord:
    models: list[str]
    tier: int


def model_allowed(patterns: list[str], model: str) -> bool:
    # "*" and exact names spare fnmatch, which costs a microsecond on every request.
    for p in patterns:
        if p == "*" or p == model or fnmatch.fnmatchcase(model, p):
            return True
    return False


def unauthorized(message: str, *, error: str | None = "invalid_token", code: str = "invalid_api_key") -> GatewayError:
    challenge = f'Bearer realm="{REALM}"'
    if error:
        # The description is ours, never the client's text; quotes would break the header.
        challenge += f', error="{error}", error_description="{message.replace(chr(34), chr(39))}"'
    return GatewayError(401, message, code=code, headers={"WWW-Authenticate": challenge})


def _mask(secret: str) -> str:
    return f"{secret[:6]}***{secret[-4:]}" if len(secret) > 14 else "***"


@dataclass(eq=False, kw_only=True)
class JwksKeys:
    """The issuer's public keys by `kid`, cached for `cache_s`; an unknown kid
    triggers one early refresh (rate-limited), which is how rotation is seen."""

    file: str | None
    url: str | None
    cache_s: float
    min_refresh_s: float = 5.0
    fetch_timeout_s: float = 5.0
    _keys: dict[str | None, jwt.PyJWK] = field(default_factory=dict, init=False, repr=False)
    _loaded_at: float = field(default=float("-inf"), init=False)  # never loaded: the first get() loads
    _file_mtime: float | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    async def _read(self) -> dict[str, Any]:
        if self.file:
            self._file_mtime = os.stat(self.file).st_mtime
            with open(self.file) as f:
                return json.load(f)
        import aiohttp  # only JWKS-by-URL deployments need it at run time

        assert self.url is not None  # a JWKS source is a file or a url (config validation)

        timeout = aiohttp.ClientTimeout(total=self.fetch_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(self.url) as resp:
                resp.raise_for_status()
                return await resp.json(content_type=None)

    async def refresh(self, seen: float | None = None) -> None:
        """Reload the key set. `seen` is the load time the caller saw: when another
        request reloaded meanwhile, one fetch serves both (no herd on the IdP)."""
        async with self._lock:
            if seen is not None and self._loaded_at != seen:
                return
            try:
                document = await self._read()
            except Exception as exc:  # keep serving with the keys we have
                log.error("JWKS refresh from %s failed: %s", self.file or self.url, exc)
                self._loaded_at = time.monotonic()
                return
            keys: dict[str | None, jwt.PyJWK] = {}
            for jwk in document.get("keys", []):
                if jwk.get("use", "sig") != "sig":
                    continue
                try:
                    keys[jwk.get("kid")] = jwt.PyJWK(jwk)
                except jwt.PyJWTError as exc:
                    log.error("JWKS key %s skipped: %s", jwk.get("kid"), exc)
            self._keys = keys
            self._loaded_at = time.monotonic()

    def _file_changed(self) -> bool:
        if not self.file:
            return False
        try:
            return os.stat(self.file).st_mtime != self._file_mtime
        except OSError:
            return False

    async def get(self, kid: str | None) -> jwt.PyJWK | None:
        seen = self._loaded_at
        if time.monotonic() - seen >= self.cache_s or self._file_changed():
            await self.refresh(seen)
        key = self._pick(kid)
        seen = self._loaded_at
        if key is None and time.monotonic() - seen >= self.min_refresh_s:
            await self.refresh(seen)
            key = self._pick(kid)
        return key

    def _pick(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is not None:
            return self._keys.get(kid)
        # A token without kid is only unambiguous when the set has one key.
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None


class JwtVerifier:
    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.algorithms = list(cfg.algorithms)
        self.jwks = (
            JwksKeys(file=cfg.jwks_file, url=cfg.jwks_url, cache_s=cfg.jwks_cache_s)
            if (cfg.jwks_file or cfg.jwks_url)
            else None
        )
        self._hs_secret: bytes | None = None
        if cfg.hs256_secret_file:
            with open(cfg.hs256_secret_file, "rb") as f:
                self._hs_secret = f.read().strip()

    async def start(self) -> None:
        if self.jwks is not None:
            await self.jwks.refresh()

    async def verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise unauthorized("The bearer token is not a valid JWT.", code="invalid_token") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise unauthorized(f"JWT algorithm {alg!r} is not allowed for this issuer.", code="invalid_token")
        key: Any
        if alg == "HS256":
            key = self._hs_secret
        else:
            jwk = await self.jwks.get(header.get("kid")) if self.jwks else None
            if jwk is None:
                raise unauthorized("The JWT's signing key (kid) is not known.", code="invalid_token")
            # PyJWK takes the algorithm from the JWK's "alg" or infers it from kty/crv.
            if jwk.key_type != ALG_KEY_TYPES[alg] or jwk.algorithm_name != alg:
                raise unauthorized(f"The JWT's key does not match algorithm {alg}.", code="invalid_token")
            key = jwk.key
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.cfg.audience,
                issuer=self.cfg.issuer,
                leeway=self.cfg.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise unauthorized("The JWT has expired.", code="invalid_token") from None
        except jwt.ImmatureSignatureError:
            raise unauthorized("The JWT is not valid yet (nbf).", code="invalid_token") from None
        except jwt.InvalidAudienceError:
            raise unauthorized("The JWT's audience is not this gateway.", code="invalid_token") from None
        except jwt.InvalidIssuerError:
            raise unauthorized("The JWT's issuer is not trusted.", code="invalid_token") from None
        except jwt.PyJWTError as exc:
            raise unauthorized(f"The JWT was rejected: {type(exc).__name__}.", code="invalid_token") from None
        # PyJWT reads a numeric string as a time; RFC 7519's NumericDate is a JSON number.
        for name in TIME_CLAIMS:
            value = claims.get(name)
            if name in claims and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise unauthorized(
                    f"The JWT's '{name}' claim must be a JSON number (RFC 7519 NumericDate).", code="invalid_token"
                )
        return claims


def _looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("eyJ")


class Authenticator:
    def __init__(self, auth_cfg: Any, tenants: Mapping[str, TenantRecord]) -> None:
        self.mode: str = auth_cfg.mode
        self.tenants = dict(tenants)
        known = set(self.tenants) if self.tenants else None
        # With auth off every request is this one principal (nothing writes to a
        # principal): built once, with the tenants, not per request.
        anonymous = self.tenants.get(ANONYMOUS_TENANT)
        self._anonymous = (
            Principal(ANONYMOUS_TENANT, None, ["*"], 1)
            if anonymous is None
            else Principal(ANONYMOUS_TENANT, None, list(anonymous.models), anonymous.tier)
        )
        self.keys = ApiKeyTable([key_record(e) for e in auth_cfg.api_keys], auth_cfg.api_keys_file, known)
        # One verifier per trusted issuer: each has its own algorithms and keys,
        # so one issuer's allow-list never lets another's tokens through.
        self.issuers: dict[str, JwtVerifier] = {}
        if "jwt" in self.mode:
            for cfg in [auth_cfg.jwt, *auth_cfg.jwt_issuers]:
                self.issuers[cfg.issuer] = JwtVerifier(cfg)
            unbound = [i for i, v in self.issuers.items() if v.cfg.tenants is None]
            if len(self.issuers) > 1 and unbound:
                log.warning(
                    "JWT issuers %s may assert any tenant: each trusted issuer can act as every tenant; "
                    "list each issuer's tenants (auth.jwt.tenants) unless one party runs them all",
                    ", ".join(unbound),
                )

    async def start(self) -> None:
        self.keys.load_file()
        for verifier in self.issuers.values():
            await verifier.start()

    def _tenant(self, name: str) -> TenantRecord:
        if not self.tenants:
            return TenantRecord(models=["*"], tier=1)
        record = self.tenants.get(name)
        if record is None:
            raise GatewayError(403, f"Tenant {name!r} is not configured on this gateway.", code="unknown_tenant")
        return record

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        if self.mode == "none":
            return self._anonymous
        credential = _credential(headers)
        if credential is None:
            raise unauthorized(
                "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' or in the 'api-key' header.",
                error=None,
            )
        if self.issuers and (self.mode == "jwt" or _looks_like_jwt(credential)):
            return await self._from_jwt(credential)
        if "keys" not in self.mode:
            raise unauthorized("The bearer token is not a valid JWT.", code="invalid_token")
        record = self.keys.lookup(credential)
        if record is None:
            raise unauthorized(f"Incorrect API key provided: {_mask(credential)}.")
        tenant = self._tenant(record.tenant)
        return Principal(
            record.tenant,
            record.key_id,
            list(record.models or tenant.models),
            record.tier if record.tier is not None else tenant.tier,
            key_requests_per_minute=record.requests_per_minute,
            key_tokens_per_minute=record.tokens_per_minute,
            key_max_concurrent=record.max_concurrent,
        )

    async def _from_jwt(self, token: str) -> Principal:
        try:
            # Unverified, only to choose the issuer whose verifier checks everything.
            issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.PyJWTError:
            raise unauthorized("The bearer token is not a valid JWT.", code="invalid_token") from None
        verifier = self.issuers.get(issuer) if isinstance(issuer, str) else None
        if verifier is None:
            raise unauthorized("The JWT's issuer is not trusted.", code="invalid_token")
        return self._from_claims(await verifier.verify(token), verifier.cfg)

    def _from_claims(self, claims: dict[str, Any], cfg: Any) -> Principal:
        name = claims.get(cfg.tenant_claim)
        if not isinstance(name, str) or not name:
            raise unauthorized(f"The JWT has no {cfg.tenant_claim!r} claim naming a tenant.", code="invalid_token")
        if cfg.tenants is not None and not model_allowed(cfg.tenants, name):
            # The token is genuine, but its issuer does not speak for this tenant.
            raise GatewayError(
                403,
                f"The JWT's issuer may not assert tenant {name[:64]!r} on this gateway.",
                code="tenant_not_allowed_for_issuer",
            )
        tenant = self._tenant(name)
        models = claims.get(cfg.models_claim)
        if isinstance(models, str):
            models = models.split()
        if not (isinstance(models, list) and all(isinstance(m, str) for m in models)):
            models = list(tenant.models)
        tier = claims.get(cfg.tier_claim)
        if not isinstance(tier, int) or isinstance(tier, bool):
            tier = tenant.tier
        return Principal(name, None, models, tier, claims)

    def may_use(self, principal: Principal, model: str) -> bool:
        if not model_allowed(principal.models, model):
            return False
        # A key's or token's list narrows the tenant's, never widens it.
        tenant = self.tenants.get(principal.tenant)
        return tenant is None or model_allowed(tenant.models, model)


CREDENTIAL_HEADERS = (b"authorization", b"api-key")


def credential_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The credential headers of a request as sent (ASGI's lower-case name/value
    pairs). A header sent twice is refused: which one to believe is exactly what
    two layers (a proxy and this gateway) could decide differently."""
    found: dict[str, str] = {}
    for name, value in raw:
        if name in CREDENTIAL_HEADERS:
            key = name.decode("latin-1")
            if key in found:
                raise _more_than_one_credential()
            found[key] = value.decode("latin-1")
    return found


def _credential(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization")
    api_key = headers.get("api-key")
    if auth is not None and api_key is not None:
        raise _more_than_one_credential()
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return None
    return api_key.strip() if api_key and api_key.strip() else None


def _more_than_one_credential() -> GatewayError:
    return unauthorized(
        "Send exactly one credential: one 'Authorization: Bearer <key>' header or one 'api-key' header.",
        error="invalid_request",
        code="invalid_request",
    )
