"""The Redis response store, shared by every gateway replica, on one Redis server,
a Redis Cluster or a Sentinel-managed master (stores/redis_connect.py).

One key per response, `{<prefix>:<tenant>}:response:<id>`, holding the serialized
record with a TTL: the tenant is part of the key, so a lookup with another
tenant's name can only miss. Keys of one tenant share a hash tag (one Redis
Cluster slot), as the quota store's keys do; each operation is one command on
one key.
"""

from __future__ import annotations

from typing import Unpack

from redis.exceptions import RedisError

from gateway.openai.responses.errors import store_unavailable
from gateway.openai.responses.store import DEFAULT_TTL_S, ResponseNotFound, ResponseStore, StoredResponse
from stores.redis_connect import ConnectionOptions, RedisTarget, RedisUnavailable, connect, hash_tag


class RedisResponseStore(ResponseStore):
    kind = "redis"

    def __init__(
        self,
        target: str | RedisTarget,
        *,
        key_prefix: str = "switchyard",
        ttl_s: float = DEFAULT_TTL_S,
        **connection: Unpack[ConnectionOptions],
    ) -> None:
        """`target`: a redis:// URL (one server) or any RedisTarget."""
        self.prefix = key_prefix
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.redis = connect(target, **connection)

    def key(self, tenant: str, response_id: str) -> str:
        return f"{hash_tag(self.prefix, tenant)}:response:{response_id}"

    async def _command(self, *args: str | bytes | int) -> object:
        try:
            return await self.redis.command(*args)
        except (RedisUnavailable, RedisError) as exc:
            raise store_unavailable(str(exc)) from exc

    async def put(self, tenant: str, record: StoredResponse) -> None:
        await self._command("SET", self.key(tenant, record.id), record.to_bytes(), "PX", self.ttl_ms)

    async def get(self, tenant: str, response_id: str) -> StoredResponse:
        raw = await self._command("GET", self.key(tenant, response_id))
        if raw is None:
            raise ResponseNotFound(response_id)
        assert isinstance(raw, bytes)
        return StoredResponse.from_bytes(raw)

    async def delete(self, tenant: str, response_id: str) -> None:
        if not await self._command("DEL", self.key(tenant, response_id)):
            raise ResponseNotFound(response_id)

    async def aclose(self) -> None:
        await self.redis.aclose()
