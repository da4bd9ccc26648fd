"""`response_store` in the config: where the Responses API keeps what it answered
(`store: true`), for `GET /v1/responses/{id}`, its `input_items` and a
continuation (`previous_response_id`).

- `kind: auto` (the default): in Redis when the quota store is (`quota_store.kind:
  redis`, the same deployment), else in this process's memory;
- `kind: memory`: in this process (bounded by `max_entries` and `max_bytes`, the
  oldest dropped first); one replica, one worker: a continuation that lands on
  another process does not find the response (404);
- `kind: redis`: the Redis deployment its own fields describe (gateway/config/redis.py:
  one server, a Cluster or Sentinel), shared by every replica and worker.

Every tenant has its own share of either store, `tenant_max_entries` responses and
`tenant_max_bytes` bytes (serialized records): a tenant's new response pushes out
its own oldest, never another tenant's, and one larger than its byte share is
refused with 413 `response_too_large` (before generation when the request alone is
that large). What is stored is capped this way, not charged as tokens.

Quotas and stored responses may share one Redis deployment (`kind: auto`, their
keys apart by name) or not: `kind: redis` with its own `url` (another database of
the same server: keys apart, memory shared) or its own deployment (a full
response store then never touches the quotas). docs/operations.md says more.

Every stored response expires `ttl_s` after it was stored. The store is built at
start (`build_response_store`, gateway/openai/responses/routes.py): changing it takes a
restart (gateway/lifecycle/reload.py).
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
    timeout_s: float = Field(1.0, gt=0)  # the longest one Redis call waits (then 503)
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
