"""The in-process quota store on a scripted clock, at its boundaries: the sliding
window's first and last bucket, a lease expiring exactly at its ttl, what a refusal
says (retry time, requested, limit), the states a reservation reports, and release:
refunds inside the window, overruns charged exactly, and releasing what the store
no longer holds (an expired lease, a reservation it never saw)."""

from __future__ import annotations

import time

import pytest

from policies.quota import QuotaExceeded, Reservation, ScopeLimits, ScopeState
from stores.quota_memory import MemoryQuotaStore


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def store() -> tuple[MemoryQuotaStore, Clock]:
    clock = Clock()
    return MemoryQuotaStore(clock_ms=clock), clock


RPM1 = (ScopeLimits("tenant", requests_per_window=1),)


async def refusal(
    s: MemoryQuotaStore, scopes, tokens: int, lease_id: str, ttl_ms: int, units: int = 1
) -> QuotaExceeded:
    """What the store says when it must refuse this reservation."""
    with pytest.raises(QuotaExceeded) as refused:
        await s.reserve("t", scopes, tokens, lease_id, ttl_ms, units=units)
    return refused.value


async def test_a_request_counts_until_its_bucket_leaves_the_window():
    s, clock = store()
    clock.ms = 1_500  # bucket 1
    first = await s.reserve("t", RPM1, 0, "a", 10_000)
    assert first.bucket == 1
    clock.ms = 60_999  # bucket 60: bucket 1 is the oldest still inside
    refused = await refusal(s, RPM1, 0, "b", 10_000)
    assert refused.retry_after_s == 0.001  # bucket 1 leaves at 61 000 ms
    assert (refused.limit, refused.requested, refused.limit_value) == ("requests", 1, 1)
    clock.ms = 61_000
    assert (await s.reserve("t", RPM1, 0, "c", 10_000)).bucket == 61


@pytest.mark.parametrize(
    "scope, held, refused_at_ms, asked, limit, requested, retry_after_s",
    [
        # a lease ends exactly at its ttl (1 s)
        (ScopeLimits("tenant", max_concurrent=1), 0, 999, 0, "concurrency", 1, 1.0),  # one lease
        # the 80 tokens of bucket 0 leave the window at 60 s
        (ScopeLimits("tenant", tokens_per_window=100), 80, 30_000, 50, "tokens", 50, 30.0),
    ],
)
async def test_a_refusal_says_when_room_frees_and_it_does_then(
    scope, held, refused_at_ms, asked, limit, requested, retry_after_s
):
    s, clock = store()
    await s.reserve("t", (scope,), held, "a", 1_000)
    clock.ms = refused_at_ms
    refused = await refusal(s, (scope,), asked, "b", 1_000)
    assert (refused.limit, refused.retry_after_s, refused.requested) == (limit, retry_after_s, requested)
    clock.ms = refused_at_ms + int(retry_after_s * 1_000)
    await s.reserve("t", (scope,), asked, "c", 1_000)


async def test_more_units_than_the_limit_can_never_fit_and_exactly_the_limit_can():
    s, _ = store()
    two = (ScopeLimits("tenant", max_concurrent=2),)
    never = await refusal(s, two, 0, "a", 1_000, units=3)
    assert never.retry_after_s is None and never.requested == 3 and never.limit_value == 2
    await s.reserve("t", two, 0, "b", 1_000, units=2)
    later = await refusal(s, two, 0, "c", 1_000, units=2)
    assert later.retry_after_s == 1.0  # units == limit: it fits once the others end


async def test_a_reservation_reports_each_scope_after_its_charge():
    s, clock = store()
    scopes = (
        ScopeLimits("tenant", requests_per_window=10, tokens_per_window=1_000, max_concurrent=5),
        ScopeLimits("key:k", requests_per_window=3),
    )
    clock.ms = 2_000
    r = await s.reserve("t", scopes, 40, "L", 5_000, units=2)
    assert (r.tenant, r.lease_id, r.bucket, r.tokens, r.store, r.units) == ("t", "L", 2, 40, "memory", 2)
    assert r.states[0] == ScopeState("tenant", 10, 9, 0, 1_000, 960, 0, 2)
    key = r.states[1]  # its token figures are for an unlimited scope: no header reads them
    assert (key.scope, key.requests_limit, key.requests_remaining, key.tokens_limit, key.concurrent) == (
        "key:k",
        3,
        2,
        -1,
        2,
    )


async def test_unused_tokens_are_refunded_while_their_bucket_is_in_the_window():
    s, clock = store()
    tpm = (ScopeLimits("tenant", tokens_per_window=100),)
    r = await s.reserve("t", tpm, 100, "a", 1_000)  # bucket 0
    clock.ms = 59_500  # bucket 59: bucket 0 is the oldest inside
    await s.release(r, used_tokens=30)
    assert (await s.reserve("t", tpm, 70, "b", 1_000)).states[0].tokens_remaining == 0


async def test_a_refunded_request_is_uncounted_while_its_bucket_is_in_the_window():
    s, clock = store()
    r = await s.reserve("t", RPM1, 0, "a", 1_000)
    clock.ms = 59_500
    await s.release(r, used_tokens=0, refund_request=True)
    await s.reserve("t", RPM1, 0, "b", 1_000)


async def test_an_overrun_is_charged_exactly_to_the_current_bucket():
    s, clock = store()
    tpm = (ScopeLimits("tenant", tokens_per_window=100),)
    r = await s.reserve("t", tpm, 10, "a", 1_000)
    clock.ms = 5_000
    await s.release(r, used_tokens=11)
    assert (await s.reserve("t", tpm, 0, "b", 1_000)).states[0].tokens_remaining == 89


async def test_releasing_what_the_store_no_longer_holds_is_harmless():
    s, clock = store()
    scopes = (ScopeLimits("tenant", requests_per_window=5, max_concurrent=5),)
    r = await s.reserve("t", scopes, 10, "a", 1_000)
    clock.ms = 2_000
    await s.reserve("t", scopes, 0, "b", 1_000)  # prunes the expired lease "a"
    await s.release(r, used_tokens=5, refund_request=True)
    stranger = Reservation("other", scopes, "x", 2, 10)
    await s.release(stranger, used_tokens=20, refund_request=True)
    await s.heartbeat([stranger], 1_000)
    assert await s.concurrent("other", "tenant") == 0


async def test_the_default_clock_is_the_wall_clock_in_milliseconds():
    before = int(time.time() * 1000) // 1000
    r = await MemoryQuotaStore().reserve("t", RPM1, 0, "a", 1_000)
    assert before <= r.bucket <= int(time.time() * 1000) // 1000


async def test_a_token_refusal_still_says_another_request_fits_now():
    s, clock = store()
    scopes = (ScopeLimits("tenant", requests_per_window=2, tokens_per_window=10),)
    await s.reserve("t", scopes, 5, "a", 1_000)
    clock.ms = 1_000
    refused = await refusal(s, scopes, 10, "b", 1_000)
    state = refused.states[0]
    assert (state.requests_remaining, state.requests_reset_ms) == (1, 0)


async def test_the_reported_concurrency_counts_the_leases_already_held():
    s, _ = store()
    scopes = (ScopeLimits("tenant", max_concurrent=5),)
    await s.reserve("t", scopes, 0, "a", 10_000, units=2)
    assert (await s.reserve("t", scopes, 0, "b", 10_000)).states[0].concurrent == 3


async def test_a_release_keeps_the_request_counted_unless_told_to_refund_it():
    s, _ = store()
    r = await s.reserve("t", RPM1, 0, "a", 1_000)
    await s.release(r, used_tokens=0)
    with pytest.raises(QuotaExceeded):
        await s.reserve("t", RPM1, 0, "b", 1_000)
