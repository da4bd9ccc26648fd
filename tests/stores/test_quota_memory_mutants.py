"""What a mutation run of stores/quota_memory.py left open: a release sent again (replay)
changes nothing once its lease is gone, and changes what it should while the lease is held;
a release that is not a replay charges its overrun even after its lease expired; a lease
is gone exactly at its expiry."""

from __future__ import annotations

from policies.quota import ScopeLimits
from stores.quota_memory import MemoryQuotaStore

TPM = (ScopeLimits("tenant", tokens_per_window=100, max_concurrent=5),)


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


async def remaining(s: MemoryQuotaStore, lease: str) -> int:
    return (await s.reserve("t", TPM, 0, lease, 1_000)).states[0].tokens_remaining


async def test_a_replayed_release_counts_once_and_only_while_its_lease_is_held():
    s = MemoryQuotaStore(clock_ms=Clock())
    r = await s.reserve("t", TPM, 10, "a", 60_000)
    await s.release(r, used_tokens=30, replay=True)  # held: the replay is the release
    assert await remaining(s, "b") == 70
    await s.release(r, used_tokens=30, replay=True)  # sent again: released already
    assert await remaining(s, "c") == 70


async def test_a_release_charges_its_overrun_even_after_its_lease_expired():
    clock = Clock()
    s = MemoryQuotaStore(clock_ms=clock)
    r = await s.reserve("t", TPM, 10, "a", 1_000)
    clock.ms = 2_000
    assert await remaining(s, "b") == 90  # the expired lease "a" is pruned
    await s.release(r, used_tokens=30)
    assert await remaining(s, "c") == 70


async def test_a_lease_is_gone_exactly_at_its_expiry():
    clock = Clock()
    s = MemoryQuotaStore(clock_ms=clock)
    await s.reserve("t", TPM, 0, "a", 1_000)
    clock.ms = 999
    assert await s.concurrent("t", "tenant") == 1
    clock.ms = 1_000
    assert await s.concurrent("t", "tenant") == 0


async def test_overruns_carried_into_the_same_window_ahead_add_up_exactly():
    limit = (ScopeLimits("tenant", tokens_per_window=100),)
    for releases, left_ahead in (((150,), 40), ((150, 50), 0)):
        clock = Clock()
        s = MemoryQuotaStore(clock_ms=clock)
        held = [await s.reserve("t", limit, 10, f"r{i}", 600_000) for i in range(2)]
        for r, used in zip(held, releases, strict=False):
            await s.release(r, used_tokens=used)  # 160 then 140 used of 100: 60, then 40 more, ahead
        clock.ms = 60_000  # the window ahead: what was carried into it counts there
        assert (await s.reserve("t", limit, 0, "x", 1_000)).states[0].tokens_remaining == left_ahead
