"""The in-process response store: bounded and expiring.

For a single gateway replica (each replica has its own; several replicas need the
Redis store so a continuation can land on any of them). Records are kept
serialized, which bounds the memory honestly (`max_bytes`) and means a caller can
never change a stored record through an object it still holds.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from gateway.openai.responses.errors import store_unavailable
from gateway.openai.responses.store import DEFAULT_TTL_S, ResponseNotFound, ResponseStore, StoredResponse


class MemoryResponseStore(ResponseStore):
    kind = "memory"

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = 10_000,
        max_bytes: int = 256 << 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        # (tenant, id) -> (expires at, record); insertion order is expiry order (one TTL).
        self._entries: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_used(self) -> int:
        return self._bytes

    async def put(self, tenant: str, record: StoredResponse) -> None:
        raw = record.to_bytes()
        if len(raw) > self.max_bytes:
            raise store_unavailable(f"the response ({len(raw)} bytes) is larger than the store ({self.max_bytes}).")
        key = (tenant, record.id)
        self._pop(key)
        self._expire()
        while self._entries and (len(self._entries) >= self.max_entries or self._bytes + len(raw) > self.max_bytes):
            self._pop(next(iter(self._entries)))  # the oldest goes first
        self._entries[key] = (self.clock() + self.ttl_s, raw)
        self._bytes += len(raw)

    async def get(self, tenant: str, response_id: str) -> StoredResponse:
        entry = self._entries.get((tenant, response_id))
        if entry is None or entry[0] <= self.clock():
            self._pop((tenant, response_id))
            raise ResponseNotFound(response_id)
        return StoredResponse.from_bytes(entry[1])

    async def delete(self, tenant: str, response_id: str) -> None:
        entry = self._pop((tenant, response_id))
        if entry is None or entry[0] <= self.clock():
            raise ResponseNotFound(response_id)

    def _pop(self, key: tuple[str, str]) -> tuple[float, bytes] | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[1])
        return entry

    def _expire(self) -> None:
        now = self.clock()
        while self._entries:
            key, (expires, _) = next(iter(self._entries.items()))
            if expires > now:
                return
            self._pop(key)
