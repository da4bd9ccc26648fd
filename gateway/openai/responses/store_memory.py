"""The in-process response store, for a single replica (several need the Redis store, so
a continuation can land on any of them): bounded per tenant and in all, and expiring.
Records are kept serialized, which bounds the memory honestly (`max_bytes`) and means a
caller can never change a stored record through an object it still holds. A tenant makes
room from its own records only, in its share and in a full store (none: `store_full`);
the shares' rules are docs/architecture.md's ("Tenancy").
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from gateway.openai.responses.errors import response_too_large, store_full
from gateway.openai.responses.store import DEFAULT_TTL_S, ResponseNotFound, ResponseStore, StoredResponse

TENANT_MAX_ENTRIES = 1_000
TENANT_MAX_BYTES = 16 << 20


class _Share:
    """One tenant's records, oldest (first to expire: one TTL) first."""

    __slots__ = ("records", "bytes")

    def __init__(self) -> None:
        self.records: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # id -> (expires at, record)
        self.bytes = 0


class MemoryResponseStore(ResponseStore):
    kind = "memory"

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = 10_000,
        max_bytes: int = 256 << 20,
        tenant_max_entries: int = TENANT_MAX_ENTRIES,
        tenant_max_bytes: int = TENANT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.tenant_max_entries = tenant_max_entries
        self.tenant_max_bytes = tenant_max_bytes
        self.clock = clock
        self._shares: dict[str, _Share] = {}
        self._count = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._count

    @property
    def bytes_used(self) -> int:
        return self._bytes

    @property
    def max_record_bytes(self) -> int:
        return min(self.max_bytes, self.tenant_max_bytes)

    async def put(self, tenant: str, record: StoredResponse) -> None:
        raw = record.to_bytes()
        if len(raw) > self.max_record_bytes:
            raise response_too_large(len(raw), self.max_record_bytes)
        share = self._shares.setdefault(tenant, _Share())
        self._pop(tenant, share, record.id)
        self._expire(tenant, share)
        # The tenant's own share first, then (the store full) its own records again.
        while share.records and (
            len(share.records) >= self.tenant_max_entries or share.bytes + len(raw) > self.tenant_max_bytes
        ):
            self._pop(tenant, share, next(iter(share.records)))
        if self._full(len(raw)):
            self._expire_all()
            while share.records and self._full(len(raw)):
                self._pop(tenant, share, next(iter(share.records)))
            if self._full(len(raw)):
                if not share.records:
                    self._shares.pop(tenant, None)
                raise store_full()
        self._shares[tenant] = share  # again: popping its last record dropped it
        share.records[record.id] = (self.clock() + self.ttl_s, raw)
        share.bytes += len(raw)
        self._count += 1
        self._bytes += len(raw)

    async def get(self, tenant: str, response_id: str) -> StoredResponse:
        share = self._shares.get(tenant)
        entry = share.records.get(response_id) if share is not None else None
        if share is None or entry is None or entry[0] <= self.clock():
            if share is not None:
                self._pop(tenant, share, response_id)
            raise ResponseNotFound(response_id)
        return StoredResponse.from_bytes(entry[1])

    async def delete(self, tenant: str, response_id: str) -> None:
        share = self._shares.get(tenant)
        entry = self._pop(tenant, share, response_id) if share is not None else None
        if entry is None or entry[0] <= self.clock():
            raise ResponseNotFound(response_id)

    def _full(self, adding: int) -> bool:
        return self._count >= self.max_entries or self._bytes + adding > self.max_bytes

    def _pop(self, tenant: str, share: _Share, response_id: str) -> tuple[float, bytes] | None:
        entry = share.records.pop(response_id, None)
        if entry is not None:
            share.bytes -= len(entry[1])
            self._count -= 1
            self._bytes -= len(entry[1])
            if not share.records:
                self._shares.pop(tenant, None)
        return entry

    def _expire(self, tenant: str, share: _Share) -> None:
        now = self.clock()
        while share.records:
            response_id, (expires, _) = next(iter(share.records.items()))
            if expires > now:
                return
            self._pop(tenant, share, response_id)

    def _expire_all(self) -> None:
        for tenant, share in list(self._shares.items()):
            self._expire(tenant, share)
