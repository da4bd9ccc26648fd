"""The rollout store on Redis, shared by every replica (the semantics: stores/rollout_store.py).

Keys of one model carry one hash tag (`{<prefix>:rollout:<model>}`), so a Redis Cluster
keeps them in one slot and each script touches them together:

    <tag>:state                    hash: version, rollout_id, state (JSON)
    <tag>:lease                    the judging replica's id, with a TTL
    <tag>:<rollout>:w:<n>:<list>   a window's records (stable, candidate) or mirror
                                   comparisons: capped lists with a TTL
    <tag>:<rollout>:evidence       the last windows' evidence, capped

Every write is one Lua script, so a transition is a compare-and-set on the version and
two replicas never both apply theirs. Any Redis failure is `RolloutStoreUnavailable`:
the controller keeps the shares it knew (fail static) and requests never fail for it.
"""

from __future__ import annotations

from typing import Any, Unpack

import orjson

from policies.rollout_records import MirrorComparison, TrackRecord
from policies.rollout_state import RolloutState
from stores.redis_connect import ConnectionOptions, LuaScript, RedisTarget, RedisUnavailable, connect, hash_tag
from stores.rollout_store import (
    COMPARISONS_MAX,
    EVIDENCE_MAX,
    RECORDS_MAX,
    WINDOWS_KEPT,
    RolloutStore,
    RolloutStoreUnavailable,
    WindowRecords,
    decode_comparison,
    decode_record,
    decode_state,
    encode_comparison,
    encode_record,
    encode_state,
)

# KEYS: state hash. ARGV: rollout id, a fresh state's JSON (version 0). Returns the state.
ENSURE_LUA = LuaScript(r"""
local rid = redis.call('HGET', KEYS[1], 'rollout_id')
if rid == ARGV[1] then return redis.call('HGET', KEYS[1], 'state') end
local old = tonumber(redis.call('HGET', KEYS[1], 'version') or '-1')
local state = cjson.decode(ARGV[2])
state['version'] = old + 1
local raw = cjson.encode(state)
redis.call('HSET', KEYS[1], 'version', old + 1, 'rollout_id', ARGV[1], 'state', raw)
return raw
""")

# KEYS: state hash. ARGV: expected version, rollout id, new version, new state JSON. 1: applied.
SWAP_LUA = LuaScript(r"""
local version = redis.call('HGET', KEYS[1], 'version')
if version ~= ARGV[1] or redis.call('HGET', KEYS[1], 'rollout_id') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[3], 'state', ARGV[4])
return 1
""")

# KEYS: one list. ARGV: cap, ttl ms, items... Appends, keeps the newest `cap`, sets the TTL.
PUSH_LUA = LuaScript(r"""
for i = 3, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[1]), -1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
""")

# KEYS: lease. ARGV: owner, ttl ms. 1: held by the owner now.
LEASE_LUA = LuaScript(r"""
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
""")

# KEYS: evidence list. ARGV: cap, ttl ms, entry.
EVIDENCE_LUA = LuaScript(r"""
redis.call('LPUSH', KEYS[1], ARGV[3])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[1]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
""")

EVIDENCE_TTL_MS = 7 * 24 * 3600 * 1000  # a finished rollout's evidence stays a week


class RedisRolloutStore(RolloutStore):
    kind = "redis"

    def __init__(
        self, target: str | RedisTarget, *, key_prefix: str = "switchyard", **connection: Unpack[ConnectionOptions]
    ) -> None:
        self.prefix = key_prefix
        self.redis = connect(target, **connection)

    def describe(self) -> str:
        return self.redis.describe()

    def _tag(self, model: str) -> str:
        return hash_tag(f"{self.prefix}:rollout", model)

    async def _run(self, script: LuaScript, keys: list[str], args: list[str | bytes | int]) -> Any:
        try:
            return await self.redis.script(script, keys, args)
        except RedisUnavailable as exc:
            raise RolloutStoreUnavailable(str(exc)) from exc

    async def _command(self, *args: str | bytes | int) -> Any:
        try:
            return await self.redis.command(*args)
        except RedisUnavailable as exc:
            raise RolloutStoreUnavailable(str(exc)) from exc

    async def ensure(self, model: str, rollout_id: str, now: float) -> RolloutState:
        fresh = encode_state(RolloutState(rollout_id, updated_at=now))
        raw = await self._run(ENSURE_LUA, [f"{self._tag(model)}:state"], [rollout_id, fresh])
        state = decode_state(raw)
        assert state is not None
        return state

    async def load(self, model: str) -> RolloutState | None:
        return decode_state(await self._command("HGET", f"{self._tag(model)}:state", "state"))

    async def swap(self, model: str, expected_version: int, new: RolloutState) -> bool:
        args: list[str | bytes | int] = [str(expected_version), new.rollout_id, new.version, encode_state(new)]
        return bool(await self._run(SWAP_LUA, [f"{self._tag(model)}:state"], args))

    def _list(self, model: str, rollout_id: str, window: int, name: str) -> str:
        return f"{self._tag(model)}:{rollout_id}:w:{window}:{name}"

    async def push(
        self,
        model: str,
        rollout_id: str,
        window: int,
        window_s: float,
        records: list[TrackRecord],
        comparisons: list[MirrorComparison],
    ) -> None:
        ttl_ms = int((window_s * WINDOWS_KEPT + 60) * 1000)
        lists: dict[str, tuple[int, list[bytes]]] = {}
        # each track capped on its own (below), as the memory store's: a cut across tracks
        # would drop a small candidate track's records from a push flooded by stable ones
        for r in records:
            lists.setdefault(r.track, (RECORDS_MAX, []))[1].append(encode_record(r))
        if comparisons:
            lists["mirror"] = (COMPARISONS_MAX, [encode_comparison(m) for m in comparisons[-COMPARISONS_MAX:]])
        for name, (cap, items) in lists.items():
            key = self._list(model, rollout_id, window, name)
            await self._run(PUSH_LUA, [key], [cap, ttl_ms, *items[-cap:]])

    async def window(self, model: str, rollout_id: str, window: int) -> WindowRecords:
        records: list[TrackRecord] = []
        for track in ("stable", "candidate"):
            raw = await self._command("LRANGE", self._list(model, rollout_id, window, track), 0, -1)
            records.extend(decode_record(item) for item in raw)
        raw = await self._command("LRANGE", self._list(model, rollout_id, window, "mirror"), 0, -1)
        return WindowRecords(records, [decode_comparison(item) for item in raw])

    async def lease(self, model: str, owner: str, ttl_s: float) -> bool:
        return bool(await self._run(LEASE_LUA, [f"{self._tag(model)}:lease"], [owner, int(ttl_s * 1000)]))

    async def put_evidence(self, model: str, rollout_id: str, entry: dict[str, Any]) -> None:
        key = f"{self._tag(model)}:{rollout_id}:evidence"
        await self._run(EVIDENCE_LUA, [key], [EVIDENCE_MAX, EVIDENCE_TTL_MS, orjson.dumps(entry)])

    async def evidence(self, model: str, rollout_id: str) -> list[dict[str, Any]]:
        raw = await self._command("LRANGE", f"{self._tag(model)}:{rollout_id}:evidence", 0, -1)
        return [orjson.loads(item) for item in raw]

    async def aclose(self) -> None:
        await self.redis.aclose()
