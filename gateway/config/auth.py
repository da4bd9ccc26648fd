"""The `auth` config section: API keys (by digest) and trusted JWT issuers. Part of
`GatewayConfig` (gateway/config/schema.py); policies/auth.py is what reads it."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, model_validator

from gateway.config.lifecycle import KeyDigest
from gateway.config.section import StrictSection as _Strict


class ApiKeyEntry(_Strict):
    sha256: KeyDigest
    tenant: str
    name: str | None = None
    models: list[str] | None = None  # narrows the tenant's models for this key
    tier: int | None = None
    # Per-key limits, checked together with the tenant's (None = only the tenant's apply).
    requests_per_minute: int | None = Field(None, ge=0)
    tokens_per_minute: int | None = Field(None, ge=0)
    max_concurrent: int | None = Field(None, ge=0)


class JwtConfig(_Strict):
    issuer: str
    audience: str | list[str]
    jwks_file: str | None = None
    jwks_url: str | None = None
    hs256_secret_file: str | None = None
    algorithms: list[Literal["RS256", "ES256", "EdDSA", "HS256"]] = Field(default_factory=lambda: ["RS256"])  # type: ignore[arg-type]  # a literal list; mypy infers list[str]
    tenant_claim: str = "tenant"
    models_claim: str = "models"
    tier_claim: str = "tier"
    # The tenants this issuer may assert (names or fnmatch patterns). None: any
    # configured tenant, so every trusted issuer can act as every tenant; set it
    # whenever issuers belong to different parties (docs/operations.md).
    tenants: list[str] | None = None
    leeway_s: float = 30.0
    jwks_cache_s: float = 300.0

    @model_validator(mode="after")
    def _key_source(self) -> JwtConfig:
        asym = [a for a in self.algorithms if a != "HS256"]
        if asym and not (self.jwks_file or self.jwks_url):
            raise ValueError(f"algorithms {asym} need jwks_file or jwks_url")
        if "HS256" in self.algorithms and not self.hs256_secret_file:
            raise ValueError("HS256 needs hs256_secret_file")
        if self.hs256_secret_file and not os.access(self.hs256_secret_file, os.R_OK):
            # Read once at start (a JWKS file, by contrast, is re-read and may come later).
            raise ValueError(f"hs256_secret_file {self.hs256_secret_file} cannot be read")
        return self


class AuthConfig(_Strict):
    mode: Literal["none", "keys", "jwt", "keys+jwt"] = "none"
    api_keys: list[ApiKeyEntry] = Field(default_factory=list)
    api_keys_file: str | None = None  # a mounted secret: YAML list of ApiKeyEntry
    jwt: JwtConfig | None = None
    # More trusted issuers beside auth.jwt, each with its own algorithm allow-list and keys.
    jwt_issuers: list[JwtConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> AuthConfig:
        if "jwt" in self.mode and self.jwt is None:
            raise ValueError(f"auth.mode {self.mode!r} needs an auth.jwt section")
        issuers = [j.issuer for j in ([self.jwt] if self.jwt else []) + self.jwt_issuers]
        if len(set(issuers)) != len(issuers):
            raise ValueError("auth.jwt and auth.jwt_issuers name the same issuer twice")
        if "keys" in self.mode and not (self.api_keys or self.api_keys_file):
            raise ValueError(f"auth.mode {self.mode!r} needs auth.api_keys or auth.api_keys_file")
        return self
