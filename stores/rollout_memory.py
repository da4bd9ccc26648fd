"""The in-process rollout store: the Redis store's semantics for one gateway process
(one replica, one worker). No method awaits in the middle, so on one event loop each
compare-and-set is atomic as the Redis store's scripts are."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from policies.rollout_records import MirrorComparison, TrackRecord
from policies.rollout_state import RolloutState
from stores.rollout_store import (
    COMPARISONS_MAX,
    EVIDENCE_MAX,
    RECORDS_MAX,
    WINDOWS_KEPT,
    RolloutStore,
    WindowRecords,
    decode_comparison,
    decode_record,
    encode_comparison,
    encode_record,
)

_Key = tuple[str, str, int]


class MemoryRolloutStore(RolloutStore):
    kind = "memory"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._states: dict[str, RolloutState] = {}
        # (model, rollout id, window) -> (expiry, {track or "mirror": newest encoded, capped})
        self._windows: dict[_Key, tuple[float, dict[str, deque[bytes]]]] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._evidence: dict[tuple[str, str], deque[dict[str, Any]]] = {}

    async def ensure(self, model: str, rollout_id: str, now: float) -> RolloutState:
        state = self._states.get(model)
        if state is not None and state.rollout_id == rollout_id:
            return state
        fresh = RolloutState(rollout_id, version=state.version + 1 if state else 0, updated_at=now)
        self._states[model] = fresh
        return fresh

    async def load(self, model: str) -> RolloutState | None:
        return self._states.get(model)

    async def swap(self, model: str, expected_version: int, new: RolloutState) -> bool:
        state = self._states.get(model)
        if state is None or state.version != expected_version or state.rollout_id != new.rollout_id:
            return False
        self._states[model] = new
        return True

    async def push(
        self,
        model: str,
        rollout_id: str,
        window: int,
        window_s: float,
        records: list[TrackRecord],
        comparisons: list[MirrorComparison],
    ) -> None:
        now = self._clock()
        self._expire(now)
        key = (model, rollout_id, window)
        expiry = now + window_s * WINDOWS_KEPT + 60
        lists = self._windows.get(key, (expiry, {}))[1]
        self._windows[key] = (expiry, lists)
        for r in records:
            lists.setdefault(r.track, deque(maxlen=RECORDS_MAX)).append(encode_record(r))
        for m in comparisons:
            lists.setdefault("mirror", deque(maxlen=COMPARISONS_MAX)).append(encode_comparison(m))

    async def window(self, model: str, rollout_id: str, window: int) -> WindowRecords:
        self._expire(self._clock())
        lists = self._windows.get((model, rollout_id, window), (0.0, {}))[1]
        records = [decode_record(raw) for track in ("stable", "candidate") for raw in lists.get(track, ())]
        return WindowRecords(records, [decode_comparison(raw) for raw in lists.get("mirror", ())])

    async def lease(self, model: str, owner: str, ttl_s: float) -> bool:
        now = self._clock()
        holder = self._leases.get(model)
        if holder is not None and holder[0] != owner and holder[1] > now:
            return False
        self._leases[model] = (owner, now + ttl_s)
        return True

    async def put_evidence(self, model: str, rollout_id: str, entry: dict[str, Any]) -> None:
        self._evidence.setdefault((model, rollout_id), deque(maxlen=EVIDENCE_MAX)).appendleft(entry)

    async def evidence(self, model: str, rollout_id: str) -> list[dict[str, Any]]:
        return list(self._evidence.get((model, rollout_id), ()))

    def _expire(self, now: float) -> None:
        for key in [k for k, (expiry, _) in self._windows.items() if expiry <= now]:
            del self._windows[key]
