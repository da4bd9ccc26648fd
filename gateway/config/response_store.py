"""`response_store` in the config: where the Responses API keeps what it answered
(`store: true`). `kind: auto` (the default) is Redis when the quota store is, else memory
(this process only); each tenant's share is bounded (`tenant_max_entries`,
`tenant_max_bytes`; one record over it is 413); records expire after `ttl_s`. docs/operations.md,
"Stored responses beside the quotas".
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.redis import RedisDeploymentConfig

DEFAULT_TTL_S = 30 * 24 * 3600.0  # OpenAI keeps stored responses for 30 days (gateway/openai/responses/store.py)


class ResponseStoreConfig(RedisDeploymentConfig):
    kind: Literal["auto", "memory", "redis"] = "auto"
    ttl_s: float = Field(DEFAULT_TTL_S, gt=0)
    key_prefix: str | None = None  # Redis keys; None: the quota store's prefix
    timeout_s: float = Field(1.0, gt=0)  # each wait of a Redis call (a connection, then its answer) before 503
    max_entries: int = Field(10_000, ge=1)  # memory: in all
    max_bytes: int = Field(256 << 20, ge=1024)  # memory: serialized records, in all
    tenant_max_entries: int = Field(1_000, ge=1)  # each tenant's share, memory and Redis
    tenant_max_bytes: int = Field(16 << 20, ge=1024)


def resolved_kind(store: ResponseStoreConfig, quota_kind: str) -> str:
    """`memory` or `redis`: what `kind` means with the quota store's kind (`auto` follows it)."""
    if store.kind == "auto":
        return "redis" if quota_kind == "redis" else "memory"
    return store.kind


def workers_warning(store: ResponseStoreConfig, quota_kind: str, workers: int) -> str | None:
    """What `serve` says at start when several workers would each keep their own store."""
    if workers < 2 or resolved_kind(store, quota_kind) != "memory":
        return None
    return (
        f"{workers} workers, and the Responses API's store is in memory: each worker keeps its own, "
        "so a GET, a delete or a continuation (previous_response_id) that lands on another worker "
        "answers 404; set response_store (or quota_store) to redis"
    )
