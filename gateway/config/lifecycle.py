"""The config sections of the process's life: who may call the admin endpoints,
how a stop drains, how the config file is watched. Part of `GatewayConfig`
(gateway/config/schema.py); docs/operations.md says how they are used."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from gateway.config.section import StrictSection as _Strict


def sha256_digest(value: str) -> str:
    """A key's SHA-256 digest as the config writes it: 64 hex characters (any case)."""
    value = value.lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError("must be the 64-character hex SHA-256 digest of the key (see `switchyard keys create`)")
    return value


KeyDigest = Annotated[str, AfterValidator(sha256_digest)]


class AdminKeyEntry(_Strict):
    sha256: KeyDigest
    name: str | None = None  # who holds it, for the log of admin calls


class AdminConfig(_Strict):
    """Credentials for /admin/reload and /admin/config (none: the admin API is off).
    Admin keys are kept apart from tenants' keys: a tenant's key never reloads a config."""

    api_keys: list[AdminKeyEntry] = Field(default_factory=list)


class DrainConfig(_Strict):
    """A graceful stop (SIGTERM): /readyz answers 503 at once; new requests are still
    served for `accept_grace_s` (time for load balancers to notice), then refused
    with 503 and Retry-After; requests under way get `timeout_s` more to finish,
    then what is left is ended with an error (an error event and [DONE] mid-stream)."""

    accept_grace_s: float = Field(0.0, ge=0)
    # Fits Kubernetes' default terminationGracePeriodSeconds (30) with time to end what is left.
    timeout_s: float = Field(25.0, ge=0)
    retry_after_s: int = Field(1, ge=1)  # in the 503s refused during a drain


class ReloadConfig(_Strict):
    """The config file is checked every `poll_interval_s` and reloaded when its content
    changed. `preflight`: what a valid reload does when a backend it adds or changes
    fails its health check: `wait` (re-checked every `preflight_interval_s`, failed after
    `preflight_timeout_s`), `refuse`, or `off` (docs/operations.md, "Swap a runtime live")."""

    watch: bool = True
    poll_interval_s: float = Field(1.0, gt=0)
    preflight: Literal["wait", "refuse", "off"] = "wait"
    preflight_timeout_s: float = Field(60.0, gt=0)
    preflight_interval_s: float = Field(1.0, gt=0)
