"""Open loop sends on schedule even when the server is slow; closed loop waits.

The server takes 1 s before its first token. An open loop of 30 requests at 60
req/s must have sent every one by ~0.48 s, each within a few ms of its
scheduled time, long before any answer returns.
"""

from __future__ import annotations

import math

from bench.arrivals import gamma_arrivals
from bench.client import Client, ClientConfig
from bench.runner import LoadPlan, Runner
from bench.workloads import synthetic


async def run(base: str, plan: LoadPlan):
    async with Client(ClientConfig(base_url=base, model="m")) as client:
        return await Runner(client, plan).run()


async def test_open_loop_sends_on_schedule_against_a_slow_server(slow_upstream: str) -> None:
    arrivals = gamma_arrivals(30, rate=60.0, burstiness=math.inf)
    records = await run(slow_upstream, LoadPlan(synthetic(30, 8, 2), arrivals=arrivals))
    assert all(r.outcome == "ok" for r in records)
    assert all(r.sent_s >= r.scheduled_s - 0.01 for r in records)  # never early (the clock's resolution aside)
    assert [r.scheduled_s for r in records] == arrivals
    # Every request was out before the first answer came back (the server takes 1 s; a
    # closed loop would have waited for it): the order, not the lags, which load stretches.
    assert max(r.sent_s for r in records) < min(r.sent_s + r.end_s for r in records)


async def test_closed_loop_waits_for_answers(slow_upstream: str) -> None:
    records = await run(slow_upstream, LoadPlan(synthetic(4, 8, 2), concurrency=2))
    by_send = sorted(records, key=lambda r: r.sent_s)
    first_done = min(r.sent_s + r.end_s for r in by_send[:2])
    # Two at once, before any answer; the third only once one of them was answered.
    assert by_send[1].sent_s < first_done <= by_send[2].sent_s + 0.01
    assert all(r.scheduled_s is None for r in records)


async def test_concurrency_cap_on_open_loop_shows_as_send_lag(slow_upstream: str) -> None:
    arrivals = gamma_arrivals(3, rate=40.0, burstiness=math.inf)
    records = await run(slow_upstream, LoadPlan(synthetic(3, 8, 2), arrivals=arrivals, concurrency=2))
    by_send = sorted(records, key=lambda r: r.sent_s)
    first_done = min(r.sent_s + r.end_s for r in by_send[:2])
    # The cap of 2 holds the third back until an answer frees a worker: its send lags.
    assert by_send[1].sent_s < first_done <= by_send[2].sent_s + 0.01
    assert by_send[2].sent_s - by_send[2].scheduled_s > by_send[1].sent_s - by_send[1].scheduled_s


async def test_closed_loop_duration_stops_starting_sessions(slow_upstream: str) -> None:
    records = await run(slow_upstream, LoadPlan(synthetic(50, 8, 2), concurrency=2, duration_s=0.5))
    # Two workers start at 0; after ~1 s both are past the deadline and stop.
    assert len(records) == 2 and all(r.outcome == "ok" for r in records)
