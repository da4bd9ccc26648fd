"""The Redis quota store: the same semantics as `quota_memory`, shared by every
gateway replica, on one Redis server, a Redis Cluster or a Sentinel-managed master
(stores/redis_connect.py). Each decision is one Lua script, so the check and the
charge cannot be interleaved by another replica. Every key a script touches carries
the tenant's hash tag `{<prefix>:<tenant>}`, so each script touches one Cluster slot.

Layout per tenant and scope ("t" = the tenant, "k:<id>" = an API key):
  {p:tenant}:<scope>:rpm    HASH bucket index -> requests
  {p:tenant}:<scope>:tpm    HASH bucket index -> tokens
  {p:tenant}:<scope>:lease  ZSET lease member -> expiry (ms, Redis clock); a request
                            holding k units has k members (policies/quota.py `lease_members`)

Out of memory (`maxmemory`): each script declares whether it may run then (the
`#!lua` line; Redis 7.0 or later). A script that takes memory (reserve, heartbeat)
is refused before it starts, so nothing of it is half done and the refusal takes
the store-down path; a release, which frees leases and tokens, runs anyway
(`allow-oom`), so a full Redis never keeps a lease. Without the declaration Redis
checks only a script's first write, and the reserve, whose first write frees,
went on filling a full server while every release was refused.

Replication is asynchronous, so a failover can lose what the old master took in its
last moments. The heartbeat therefore re-creates (not only refreshes) the lease
members of the reservations the gateway still holds: a lease lost in a failover is
back by the next heartbeat. docs/operations.md ("Redis in production") states the
window.
"""

from __future__ import annotations

import logging
from typing import Any, Unpack

from policies.quota import (
    BUCKET_MS,
    WINDOW_MS,
    QuotaAsk,
    QuotaExceeded,
    QuotaStore,
    QuotaStoreUnavailable,
    Reservation,
    ScopeState,
)
from stores.redis_connect import ConnectionOptions, LuaScript, RedisTarget, RedisUnavailable, connect, hash_tag

log = logging.getLogger("switchyard.quota")

# KEYS: per scope, rpm, tpm, lease (3 * nscopes keys).
# ARGV: window_ms, bucket_ms, lease_id, lease_ttl_ms, tokens, units, then per scope
#       rpm_limit, tpm_limit, conc_limit (-1 = unlimited).
# Returns {ok, failed_scope_index, failed_limit, retry_ms, bucket, per-scope
#          rpm_used, rpm_reset_ms, tpm_used, tpm_reset_ms, concurrent}
# (the reset times as policies/quota.py `ScopeState` defines them).
# retry_ms = -1 when no wait can help.
RESERVE_LUA = LuaScript(r"""#!lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local bucket_ms = tonumber(ARGV[2])
local lease_id = ARGV[3]
local ttl = tonumber(ARGV[4])
local tokens = tonumber(ARGV[5])
local units = tonumber(ARGV[6])
local nb = window / bucket_ms
local current = math.floor(now / bucket_ms)
local oldest = current - nb + 1
local nscopes = #KEYS / 3

local function read_window(key)
  local flat = redis.call('HGETALL', key)
  local used, items, stale = 0, {}, {}
  for i = 1, #flat, 2 do
    local b, v = tonumber(flat[i]), tonumber(flat[i + 1])
    if b < oldest then stale[#stale + 1] = flat[i]
    else used = used + v; items[#items + 1] = {b, v} end
  end
  if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
  table.sort(items, function(a, b) return a[1] < b[1] end)
  return used, items
end

local function wait_until_fits(items, used, need, limit)
  if need > limit then return -1 end
  local excess = used + need - limit
  if excess <= 0 then return 0 end
  local freed = 0
  for _, it in ipairs(items) do
    freed = freed + it[2]
    if freed >= excess then return math.max(0, (it[1] + nb) * bucket_ms - now) end
  end
  return window
end

local function lease_member(i)
  if i == 0 then return lease_id end
  return lease_id .. '#' .. i
end

-- When the same request could be sent again: 0 while it fits (a need over the
-- whole limit waits for an empty window).
local function reset(items, used, need, limit)
  if limit < 0 then return 0 end
  if need > limit then need = limit end
  return wait_until_fits(items, used, need, limit)
end

local function with_charge(items, amount)
  local out = {}
  for i, it in ipairs(items) do out[i] = {it[1], it[2]} end
  local last = out[#out]
  if last and last[1] == current then last[2] = last[2] + amount
  else out[#out + 1] = {current, amount} end
  return out
end

local out = {1, 0, '', 0, current}
local states, windows, limits = {}, {}, {}
for s = 1, nscopes do
  local rk, tk, lk = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
  local base = 6 + 3 * (s - 1)
  local rpm_limit, tpm_limit, conc_limit = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local rused, ritems = read_window(rk)
  local tused, titems = read_window(tk)
  redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
  local conc = redis.call('ZCARD', lk)
  if out[1] == 1 then
    if rpm_limit >= 0 and rused + 1 > rpm_limit then
      out = {0, s, 'requests', wait_until_fits(ritems, rused, 1, rpm_limit), current}
    elseif tpm_limit >= 0 and tused + tokens > tpm_limit then
      out = {0, s, 'tokens', wait_until_fits(titems, tused, tokens, tpm_limit), current}
    elseif conc_limit >= 0 and conc + units > conc_limit then
      local w = 1000
      if units > conc_limit then w = -1 end
      out = {0, s, 'concurrency', w, current}
    end
  end
  states[s] = {rused, reset(ritems, rused, 1, rpm_limit), tused, reset(titems, tused, tokens, tpm_limit), conc}
  windows[s] = {ritems, titems}
  limits[s] = {rpm_limit, tpm_limit}
end

if out[1] == 1 then
  for s = 1, nscopes do
    local rk, tk, lk = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
    redis.call('HINCRBY', rk, current, 1)
    redis.call('PEXPIRE', rk, window + bucket_ms)
    redis.call('HINCRBY', tk, current, tokens)
    redis.call('PEXPIRE', tk, window + bucket_ms)
    for i = 0, units - 1 do redis.call('ZADD', lk, now + ttl, lease_member(i)) end
    redis.call('PEXPIRE', lk, ttl * 2)
    local st = states[s]
    st[1] = st[1] + 1; st[3] = st[3] + tokens; st[5] = st[5] + units
    st[2] = reset(with_charge(windows[s][1], 1), st[1], 1, limits[s][1])
    st[4] = reset(with_charge(windows[s][2], tokens), st[3], tokens, limits[s][2])
  end
end
for s = 1, nscopes do
  for _, v in ipairs(states[s]) do out[#out + 1] = v end
end
return out
""")

# KEYS: per scope, rpm, tpm, lease. ARGV: window_ms, bucket_ms, lease_id, bucket,
# delta_tokens (used - reserved), refund_request (0/1), units, replay (0/1).
# A replay reconciles only the scopes still holding the lease: the lease member is
# the marker that this release has not run yet (policies/quota.py QuotaStore.release).
RELEASE_LUA = LuaScript(r"""#!lua flags=allow-oom
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window, bucket_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local lease_id, bucket = ARGV[3], ARGV[4]
local delta, refund = tonumber(ARGV[5]), ARGV[6] == '1'
local units = tonumber(ARGV[7])
local replay = ARGV[8] == '1'
local current = math.floor(now / bucket_ms)
local in_window = tonumber(bucket) >= current - window / bucket_ms + 1
for s = 1, #KEYS / 3 do
  local rk, tk, lk = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
  local pending = not replay or redis.call('ZSCORE', lk, lease_id)
  if not pending then
    -- released already: the leases only (ZREM below finds nothing)
  elseif delta < 0 and in_window then
    local have = tonumber(redis.call('HGET', tk, bucket) or '0')
    if have > 0 then redis.call('HINCRBY', tk, bucket, math.max(delta, -have)) end
  elseif delta > 0 then
    redis.call('HINCRBY', tk, current, delta)
    redis.call('PEXPIRE', tk, window + bucket_ms)
  end
  if pending and refund and in_window then
    local have = tonumber(redis.call('HGET', rk, bucket) or '0')
    if have > 0 then redis.call('HINCRBY', rk, bucket, -1) end
  end
  redis.call('ZREM', lk, lease_id)
  for i = 1, units - 1 do redis.call('ZREM', lk, lease_id .. '#' .. i) end
end
return 1
""")

# KEYS: lease zsets. ARGV: lease_ttl_ms, then one lease member per key.
# Adds a member that is missing (lost in a failover, or expired while its request
# still runs): the gateway's own list of what it holds is the truth. Returns how
# many it re-created.
HEARTBEAT_LUA = LuaScript(r"""#!lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local added = 0
for i = 1, #KEYS do
  added = added + redis.call('ZADD', KEYS[i], now + ttl, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], ttl * 2)
end
return added
""")

# KEYS: one lease zset. Returns live leases.
COUNT_LUA = LuaScript(r"""#!lua flags=allow-oom
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
""")


class RedisQuotaStore(QuotaStore):
    kind = "redis"

    def __init__(
        self,
        target: str | RedisTarget,
        *,
        key_prefix: str = "switchyard",
        window_ms: int = WINDOW_MS,
        bucket_ms: int = BUCKET_MS,
        **connection: Unpack[ConnectionOptions],
    ) -> None:
        """`target`: a redis:// URL (one server) or any RedisTarget. The connection's
        default timeout is short: a hung Redis must turn into the fail policy quickly,
        not into requests that hang with it. A burst waits for a connection (up to
        `pool_wait_s`) rather than failing, which would look like an outage and
        open the fail policy in exactly the burst the shared limits are for."""
        if window_ms % bucket_ms:
            raise ValueError("window_ms must be a multiple of bucket_ms")
        self.window_ms = window_ms
        self.bucket_ms = bucket_ms
        self.prefix = key_prefix
        self.leases_recreated = 0  # lease members the heartbeat found missing and added back
        self.redis = connect(target, **connection)

    def describe(self) -> str:
        return self.redis.describe()

    def keys(self, tenant: str, scope: str) -> list[str]:
        """The rpm, tpm and lease keys of one scope of `tenant` (one hash tag per tenant)."""
        base = f"{hash_tag(self.prefix, tenant)}:{scope}"
        return [f"{base}:rpm", f"{base}:tpm", f"{base}:lease"]

    async def _run(self, script: LuaScript, keys: list[str], args: list[int | str]) -> Any:
        try:
            return await self.redis.script(script, keys, args)
        except RedisUnavailable as exc:
            raise QuotaStoreUnavailable(str(exc)) from exc

    async def ping(self) -> None:
        try:
            await self.redis.ping(f"{hash_tag(self.prefix, '')}:probe")
        except RedisUnavailable as exc:
            raise QuotaStoreUnavailable(str(exc)) from exc

    async def reset_connections(self) -> None:
        await self.redis.reset_connections()

    async def take(self, ask: QuotaAsk) -> Reservation:
        tenant, scopes, tokens, lease_id, units = ask.tenant, ask.scopes, ask.tokens, ask.lease_id, ask.units
        keys: list[str] = []
        args: list[int | str] = [self.window_ms, self.bucket_ms, lease_id, ask.lease_ttl_ms, tokens, units]
        for scope in scopes:
            keys += self.keys(tenant, scope.name)
            args += [scope.requests_per_window, scope.tokens_per_window, scope.max_concurrent]
        out = await self._run(RESERVE_LUA, keys, args)
        ok, failed_index, failed_limit, retry_ms, bucket = out[:5]
        states = []
        for i, scope in enumerate(scopes):
            rused, rreset, tused, treset, conc = (int(v) for v in out[5 + 5 * i : 10 + 5 * i])
            states.append(
                ScopeState(
                    scope.name,
                    scope.requests_per_window,
                    scope.requests_per_window - rused,
                    rreset,
                    scope.tokens_per_window,
                    scope.tokens_per_window - tused,
                    treset,
                    conc,
                )
            )
        if not ok:
            scope = scopes[int(failed_index) - 1]
            limit = failed_limit.decode() if isinstance(failed_limit, bytes) else str(failed_limit)
            requested = {"tokens": tokens, "concurrency": units}.get(limit, 1)
            value = {
                "requests": scope.requests_per_window,
                "tokens": scope.tokens_per_window,
                "concurrency": scope.max_concurrent,
            }[limit]
            wait = None if int(retry_ms) < 0 else int(retry_ms) / 1000
            raise QuotaExceeded(scope.name, limit, wait, states, requested, value)
        return Reservation(tenant, scopes, lease_id, int(bucket), tokens, states, self.kind, units)

    async def release(
        self, reservation: Reservation, used_tokens: int, refund_request: bool = False, *, replay: bool = False
    ) -> None:
        keys: list[str] = []
        for scope in reservation.scopes:
            keys += self.keys(reservation.tenant, scope.name)
        args: list[int | str] = [
            self.window_ms,
            self.bucket_ms,
            reservation.lease_id,
            reservation.bucket,
            used_tokens - reservation.tokens,
            1 if refund_request else 0,
            reservation.units,
            1 if replay else 0,
        ]
        await self._run(RELEASE_LUA, keys, args)

    async def heartbeat(self, reservations: list[Reservation], lease_ttl_ms: int) -> None:
        """Refresh the leases of `reservations`, re-creating any the store lost
        (counted in `leases_recreated`, and logged)."""
        # One script per tenant: a script's keys must share one Cluster slot.
        by_tenant: dict[str, tuple[list[str], list[int | str]]] = {}
        for r in reservations:
            keys, ids = by_tenant.setdefault(r.tenant, ([], [lease_ttl_ms]))
            for scope in r.scopes:
                lease_key = self.keys(r.tenant, scope.name)[2]
                for member in r.lease_members():
                    keys.append(lease_key)
                    ids.append(member)
        recreated = 0
        for keys, args in by_tenant.values():
            recreated += int(await self._run(HEARTBEAT_LUA, keys, args))
        if recreated:
            self.leases_recreated += recreated
            log.warning("re-created %d lease(s) that %s had lost (a failover?)", recreated, self.describe())

    async def concurrent(self, tenant: str, scope: str) -> int:
        return int(await self._run(COUNT_LUA, [self.keys(tenant, scope)[2]], []))

    async def aclose(self) -> None:
        await self.redis.aclose()
