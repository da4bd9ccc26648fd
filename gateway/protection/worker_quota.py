"""Quota limits in memory when one port is served by several worker processes
(`serve --workers N`): each worker keeps its own counters, so each enforces its
share of every limit, and together they admit at most the limit. With Redis the
workers share one set of counters and the limits are exact; this store is then
only the fail-open fallback, per worker like any local limit.

The share is the limit divided by N, rounded down, and never below 1 for a limit
above 0 (a limit of 0 stays 0): a limit smaller than N admits N, one per worker,
rather than nothing. docs/operations.md ("Workers") says so to operators.
"""

from __future__ import annotations

import dataclasses

from policies.quota import UNLIMITED, QuotaAsk, Reservation, ScopeLimits
from stores.quota_memory import MemoryQuotaStore


def worker_share(limit: int, workers: int) -> int:
    """One worker's share of `limit` (UNLIMITED stays unlimited)."""
    if limit == UNLIMITED or limit == 0:
        return limit
    return max(1, limit // workers)


def scope_share(scope: ScopeLimits, workers: int) -> ScopeLimits:
    return dataclasses.replace(
        scope,
        requests_per_window=worker_share(scope.requests_per_window, workers),
        tokens_per_window=worker_share(scope.tokens_per_window, workers),
        max_concurrent=worker_share(scope.max_concurrent, workers),
    )


class WorkerShareStore(MemoryQuotaStore):
    """The memory store of one worker among `workers`: every limit is its share."""

    def __init__(self, workers: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.workers = workers

    async def take(self, ask: QuotaAsk) -> Reservation:
        shares = tuple(scope_share(s, self.workers) for s in ask.scopes)
        return await super().take(dataclasses.replace(ask, scopes=shares))
