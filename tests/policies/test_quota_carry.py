"""An overrun charged at release (the runtime counted more than was reserved) is
carried past the window into the next ones, in both stores, so a tenant whose
requests are underestimated still cannot sustain more than its tokens per minute."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from policies.quota import MAX_CARRY_WINDOWS, QuotaExceeded, ScopeLimits, carry_overrun
from stores.quota_memory import MemoryQuotaStore
from stores.quota_redis import RedisQuotaStore

LIMIT = 6_000
TPM = (ScopeLimits("t", tokens_per_window=LIMIT),)


def test_only_the_part_past_the_limit_moves_a_window_at_a_time():
    assert carry_overrun(window_used=5_000, overrun=3_000, limit=LIMIT, current=7, buckets=60) == []
    assert carry_overrun(window_used=8_000, overrun=3_000, limit=LIMIT, current=7, buckets=60) == [(67, 2_000)]
    # More than the overrun never moves (what was there before was admitted within the limit).
    assert carry_overrun(window_used=20_000, overrun=1_000, limit=LIMIT, current=0, buckets=60) == [(60, 1_000)]
    assert carry_overrun(window_used=19_000, overrun=19_000, limit=LIMIT, current=0, buckets=60) == [
        (60, 6_000),
        (120, 6_000),
        (180, 1_000),
    ]
    far = carry_overrun(window_used=10**9, overrun=10**9, limit=LIMIT, current=0, buckets=60)
    assert len(far) == MAX_CARRY_WINDOWS and sum(a for _, a in far) == 10**9 - LIMIT


def test_a_carry_at_its_smallest_amounts_and_none_without_a_limit():
    assert carry_overrun(window_used=LIMIT + 1, overrun=1, limit=LIMIT, current=7, buckets=60) == [(67, 1)]
    assert carry_overrun(window_used=3, overrun=2, limit=1, current=0, buckets=60) == [(60, 1), (120, 1)]
    assert carry_overrun(window_used=LIMIT + 5, overrun=0, limit=LIMIT, current=0, buckets=60) == []
    assert (
        carry_overrun(window_used=500, overrun=500, limit=0, current=0, buckets=60) == []
    )  # 0: no limit to carry past


async def test_an_underestimating_tenant_sustains_no_more_than_its_limit():
    """Each request reserves 100 tokens and the runtime counts 8,000. Before the carry,
    every window admitted one (8,000 a minute against 6,000); now the debt holds the
    tenant out until it is paid, so ten minutes hold at most ten windows' worth, plus
    the one request whose debt is still being paid."""
    clock = [0]
    store = MemoryQuotaStore(clock_ms=lambda: clock[0])
    charged = 0
    for second in range(600):
        clock[0] = second * 1000
        try:
            r = await store.reserve("t", TPM, 100, uuid.uuid4().hex, 10_000)
        except QuotaExceeded:
            continue
        await store.release(r, used_tokens=8_000)
        charged += 8_000
    assert charged <= 10 * LIMIT + 8_000
    assert charged >= 7 * LIMIT  # it is held out, not locked out


@pytest.fixture(params=["memory", "redis"])
async def fast_store(request, shared_redis):
    """A store with a one-second window of 100 ms buckets (Redis reads its own clock)."""
    if request.param == "memory":
        yield MemoryQuotaStore(window_ms=1000, bucket_ms=100)
        return
    store = RedisQuotaStore(shared_redis.url, key_prefix=f"c{uuid.uuid4().hex[:8]}", window_ms=1000, bucket_ms=100)
    yield store
    await store.aclose()


async def test_the_debt_outlives_the_window_it_was_made_in(fast_store):
    """Both stores: 3 windows' worth over the limit is still owed one window later (the
    old release charged it to the current bucket only, which left with the window),
    and a reserve in between does not shorten how long Redis keeps it."""
    r = await fast_store.reserve("acme", TPM, 100, uuid.uuid4().hex, 10_000)
    await fast_store.release(r, used_tokens=4 * LIMIT)
    await asyncio.sleep(1.15)  # one window and a bit: every bucket of that window has left
    with pytest.raises(QuotaExceeded) as refused:
        await fast_store.reserve("acme", TPM, LIMIT // 2, uuid.uuid4().hex, 10_000)
    assert refused.value.limit == "tokens"
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s > 0
    # Nothing is lost: the tenant gets back in once the debt's windows have passed.
    await asyncio.sleep(3.2)
    await fast_store.reserve("acme", TPM, LIMIT // 2, uuid.uuid4().hex, 10_000)
