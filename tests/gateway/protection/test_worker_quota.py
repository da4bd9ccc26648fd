"""gateway/protection/worker_quota.py: each of N workers enforces its share of every
limit of every scope (requests, tokens and concurrency), never below 1 for a limit
above 0; a limit of 0 stays 0 and an unlimited one unlimited."""

from __future__ import annotations

import pytest

from gateway.protection.worker_quota import WorkerShareStore, scope_share, worker_share
from policies.quota import UNLIMITED, QuotaExceeded, ScopeLimits


@pytest.mark.parametrize(("limit", "share"), [(2, 1), (3, 1), (4, 2), (5, 2), (1, 1), (0, 0), (UNLIMITED, UNLIMITED)])
def test_two_workers_share_a_limit_rounded_down_never_below_one(limit, share) -> None:
    assert worker_share(limit, 2) == share


def test_every_limit_of_a_scope_is_shared_and_its_name_kept() -> None:
    assert scope_share(ScopeLimits("k:x", 10, 100, 7), 3) == ScopeLimits("k:x", 3, 33, 2)
    assert scope_share(ScopeLimits("t", UNLIMITED, 0, 1), 3) == ScopeLimits("t", UNLIMITED, 0, 1)


async def test_a_worker_store_admits_its_share_of_tokens_and_concurrency() -> None:
    store = WorkerShareStore(2, window_ms=10_000, bucket_ms=1_000)
    assert (store.workers, store.window_ms, store.bucket_ms) == (2, 10_000, 1_000)
    scopes = (ScopeLimits("t", tokens_per_window=100, max_concurrent=4),)
    await store.reserve("a", scopes, 50, "l1", 30_000)
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("a", scopes, 1, "l2", 30_000)
    assert (exc.value.limit, exc.value.limit_value) == ("tokens", 50)
    await store.reserve("a", (ScopeLimits("c", max_concurrent=4),), 0, "l3", 30_000, units=2)
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("a", (ScopeLimits("c", max_concurrent=4),), 0, "l4", 30_000)
    assert (exc.value.limit, exc.value.limit_value) == ("concurrency", 2)
