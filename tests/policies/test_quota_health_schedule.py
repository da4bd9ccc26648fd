"""The quota store's probe schedule read exactly, with the sleeps recorded instead
of waited out (tests/policies/test_quota_health.py checks it in real time): the
delays double from the first to the cap, the outage length reported is the time
since the store went down, and closing is safe whether or not a probe runs."""

from __future__ import annotations

import asyncio
import time

import pytest

from policies.quota import QuotaStoreUnavailable
from policies.quota_health import StoreHealth


@pytest.fixture
def recorded_sleeps(monkeypatch):
    """asyncio.sleep records each delay and yields once instead of waiting."""
    real_sleep = asyncio.sleep
    delays: list[float] = []

    async def sleep(delay, result=None):
        delays.append(delay)
        await real_sleep(0)
        return result

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return delays, real_sleep


async def test_the_delays_double_from_the_first_to_the_cap(recorded_sleeps):
    delays, real_sleep = recorded_sleeps
    probes = 0

    async def refusing() -> None:
        nonlocal probes
        probes += 1
        if probes < 6:
            raise QuotaStoreUnavailable("refused")

    health = StoreHealth(refusing, lambda change: None, first_delay_s=0.01, max_delay_s=0.1)
    health.mark_down("refused")
    while not health.up:
        await real_sleep(0)
    assert delays == [0.01, 0.02, 0.04, 0.08, 0.1, 0.1]  # one sleep before each of the six probes
    await health.aclose()


async def test_the_outage_reported_is_the_time_since_the_store_went_down():
    seen = []
    answering = asyncio.Event()

    async def probe() -> None:
        if not answering.is_set():
            raise QuotaStoreUnavailable("refused")

    health = StoreHealth(probe, seen.append, first_delay_s=0.01, max_delay_s=0.02)
    before = time.monotonic()
    health.mark_down("refused")
    assert health.up is False
    await asyncio.sleep(0.05)
    answering.set()
    while not health.up:
        await asyncio.sleep(0.01)
    elapsed = time.monotonic() - before
    assert 0.05 <= seen[-1].down_for_s <= elapsed
    await health.aclose()


async def test_closing_a_store_that_never_went_down_is_a_no_op():
    health = StoreHealth(lambda: asyncio.sleep(0), lambda change: None)
    await health.aclose()
    assert health.up is True


async def test_closing_stops_the_running_probe():
    async def refusing() -> None:
        raise QuotaStoreUnavailable("refused")

    health = StoreHealth(refusing, lambda change: None, first_delay_s=0.01, max_delay_s=0.01)
    health.mark_down("refused")
    probers = [t for t in asyncio.all_tasks() if t.get_name() == "quota-store-probe"]
    assert len(probers) == 1  # named, so it can be found in a task dump
    await health.aclose()
    assert probers[0].done() and not health.up
