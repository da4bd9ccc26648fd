"""The Redis response store, shared by every gateway replica, on one Redis server,
a Redis Cluster or a Sentinel-managed master (stores/redis_connect.py).

Keys of one tenant share its hash tag (one Redis Cluster slot), as the quota
store's keys do, and the tenant is part of every key, so a lookup with another
tenant's name can only miss:

  {<prefix>:<tenant>}:response:<id>      the serialized record, expiring after the TTL
  {<prefix>:<tenant>}:responses          ZSET id -> when it was stored (ms, Redis clock)
  {<prefix>:<tenant>}:responses:size     HASH id -> the record's bytes
  {<prefix>:<tenant>}:responses:bytes    the tenant's stored bytes in all

A put is one script (`PUT_LUA`) that drops the tenant's expired entries, then its own
oldest while it is over its share, then stores (docs/operations.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, Unpack

from gateway.openai.responses.errors import response_too_large, store_unavailable
from gateway.openai.responses.store import DEFAULT_TTL_S, ResponseNotFound, ResponseStore, StoredResponse
from gateway.openai.responses.store_memory import TENANT_MAX_BYTES, TENANT_MAX_ENTRIES
from stores.redis_connect import ConnectionOptions, LuaScript, RedisTarget, RedisUnavailable, connect, hash_tag

log = logging.getLogger("switchyard.responses")

# KEYS: record, index, sizes, total. ARGV: id, record, ttl_ms, max_entries, max_bytes,
# the tenant's record key prefix (an evicted id's key). Returns how many it evicted.
# `#!lua`: a full Redis refuses it whole (stores/quota_redis.py).
PUT_LUA = LuaScript(r"""#!lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local index, sizes, total = KEYS[2], KEYS[3], KEYS[4]
local id, raw, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local max_entries, max_bytes, prefix = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local used = tonumber(redis.call('GET', total) or '0')
local function drop(member)
  used = used - tonumber(redis.call('HGET', sizes, member) or '0')
  redis.call('ZREM', index, member)
  redis.call('HDEL', sizes, member)
  redis.call('DEL', prefix .. member)
end
for _, member in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now - ttl)) do drop(member) end
if redis.call('ZSCORE', index, id) then drop(id) end
local count, evicted = redis.call('ZCARD', index), 0
while count > 0 and (count >= max_entries or used + #raw > max_bytes) do
  drop(redis.call('ZRANGE', index, 0, 0)[1])
  count, evicted = count - 1, evicted + 1
end
-- put order, even within one millisecond (equal scores would evict by id instead)
local top = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')[2]
local score = now
if top and tonumber(top) >= now then score = tonumber(top) + 0.001 end
redis.call('SET', KEYS[1], raw, 'PX', ttl)
redis.call('ZADD', index, score, id)
redis.call('HSET', sizes, id, #raw)
redis.call('SET', total, used + #raw, 'PX', ttl)
redis.call('PEXPIRE', index, ttl)
redis.call('PEXPIRE', sizes, ttl)
return evicted
""")

# KEYS: record, index, sizes, total. ARGV: id. Returns 1 if the record was there.
DELETE_LUA = LuaScript(r"""#!lua flags=allow-oom
local existed = redis.call('DEL', KEYS[1])
local size = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[3], ARGV[1])
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('DECRBY', KEYS[4], size) end
end
return existed
""")


class RedisResponseStore(ResponseStore):
    kind = "redis"

    def __init__(
        self,
        target: str | RedisTarget,
        *,
        key_prefix: str = "switchyard",
        ttl_s: float = DEFAULT_TTL_S,
        tenant_max_entries: int = TENANT_MAX_ENTRIES,
        tenant_max_bytes: int = TENANT_MAX_BYTES,
        **connection: Unpack[ConnectionOptions],
    ) -> None:
        """`target`: a redis:// URL (one server) or any RedisTarget."""
        self.prefix = key_prefix
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.tenant_max_entries = tenant_max_entries
        self.tenant_max_bytes = tenant_max_bytes
        self.redis = connect(target, **connection)

    @property
    def max_record_bytes(self) -> int:
        return self.tenant_max_bytes

    def key(self, tenant: str, response_id: str) -> str:
        return f"{hash_tag(self.prefix, tenant)}:response:{response_id}"

    def keys(self, tenant: str, response_id: str) -> list[str]:
        """The record's key and its tenant's index, sizes and total (module docstring)."""
        index = f"{hash_tag(self.prefix, tenant)}:responses"
        return [self.key(tenant, response_id), index, f"{index}:size", f"{index}:bytes"]

    async def _call(self, what: str, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except RedisUnavailable as exc:
            log.warning("response store %s: %s failed: %s", self.redis.describe(), what, exc)
            raise store_unavailable() from exc

    async def put(self, tenant: str, record: StoredResponse) -> None:
        raw = record.to_bytes()
        if len(raw) > self.tenant_max_bytes:
            raise response_too_large(len(raw), self.tenant_max_bytes)
        args: list[str | bytes | int] = [
            record.id,
            raw,
            self.ttl_ms,
            self.tenant_max_entries,
            self.tenant_max_bytes,
            self.key(tenant, ""),
        ]
        await self._call("put", self.redis.script(PUT_LUA, self.keys(tenant, record.id), args))

    async def get(self, tenant: str, response_id: str) -> StoredResponse:
        raw = await self._call("get", self.redis.command("GET", self.key(tenant, response_id)))
        if raw is None:
            raise ResponseNotFound(response_id)
        assert isinstance(raw, bytes)
        return StoredResponse.from_bytes(raw)

    async def delete(self, tenant: str, response_id: str) -> None:
        if not await self._call("delete", self.redis.script(DELETE_LUA, self.keys(tenant, response_id), [response_id])):
            raise ResponseNotFound(response_id)

    async def aclose(self) -> None:
        await self.redis.aclose()
