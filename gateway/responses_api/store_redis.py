"""The Redis response store, shared by every gateway replica.

One key per response, `{<prefix>:<tenant>}:response:<id>`, holding the serialized
record with a TTL: the tenant is part of the key, so a lookup with another
tenant's name can only miss. Keys of one tenant share a hash tag (one Redis
Cluster slot), as the quota store's keys do.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.responses_api.errors import store_unavailable
from gateway.responses_api.store import DEFAULT_TTL_S, ResponseNotFound, ResponseStore, StoredResponse


def _tag(text: str) -> str:
    # Braces would end the hash tag early; `%` is escaped so the escape is unambiguous.
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


class RedisResponseStore(ResponseStore):
    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "switchyard",
        ttl_s: float = DEFAULT_TTL_S,
        timeout_s: float = 1.0,
        max_connections: int = 64,
        pool_wait_s: float = 2.0,
    ) -> None:
        self.prefix = key_prefix
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self._pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=pool_wait_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
        )
        self.client = aioredis.Redis(connection_pool=self._pool)

    def key(self, tenant: str, response_id: str) -> str:
        return f"{{{_tag(self.prefix)}:{_tag(tenant)}}}:response:{response_id}"

    async def put(self, tenant: str, record: StoredResponse) -> None:
        try:
            await self.client.set(self.key(tenant, record.id), record.to_bytes(), px=self.ttl_ms)
        except (RedisError, OSError) as exc:
            raise store_unavailable(str(exc)) from exc

    async def get(self, tenant: str, response_id: str) -> StoredResponse:
        try:
            raw = await self.client.get(self.key(tenant, response_id))
        except (RedisError, OSError) as exc:
            raise store_unavailable(str(exc)) from exc
        if raw is None:
            raise ResponseNotFound(response_id)
        return StoredResponse.from_bytes(raw)

    async def delete(self, tenant: str, response_id: str) -> None:
        try:
            removed = await self.client.delete(self.key(tenant, response_id))
        except (RedisError, OSError) as exc:
            raise store_unavailable(str(exc)) from exc
        if not removed:
            raise ResponseNotFound(response_id)

    async def aclose(self) -> None:
        await self.client.aclose()
        await self._pool.disconnect()
