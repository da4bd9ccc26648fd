"""What gateway/protection/gate.py's rerun left open, in process: a read of stored
responses (`admit_read`, `stored_read_usage`) as a request of its tenant (one request,
one unit of concurrency, one token reserved, its bytes charged at release, no queue
place), the prompt estimate sized only when a limit needs it, and a call's size held up
to the tenant's concurrency and never refused for it."""

from __future__ import annotations

import pytest

from adapters.base import Usage
from adapters.errors import GatewayError
from gateway.observe.context import NoTrace, make_current
from gateway.protection.gate import STORED_BYTES_PER_TOKEN, STORED_READS, stored_read_usage
from tests.gateway.protection_kit import config, make, never_gone, principal, request


@pytest.mark.parametrize(("sent", "tokens"), [(0, 1), (1, 1), (4, 1), (5, 2), (8, 2), (9, 3), (4000, 1000)])
def test_a_read_is_charged_a_token_per_four_bytes_rounded_up_and_at_least_one(sent, tokens):
    assert STORED_BYTES_PER_TOKEN == 4
    assert stored_read_usage(sent) == Usage(prompt_tokens=tokens, completion_tokens=0)


class Steps(NoTrace):
    def __init__(self) -> None:
        self.names: list[str] = []

    def step(self, name: str):
        self.names.append(name)
        return super().step(name)


async def test_a_read_without_limits_reserves_nothing_and_holds_no_queue_place():
    p = await make({"quota_store": {"kind": "memory"}})
    try:
        who = await principal(p, "anything")
        steps = Steps()
        make_current(steps)
        ticket = await p.admit_read(who)
        assert steps.names == []  # no quota step: nothing to reserve
        assert (ticket.model, ticket.reservation, ticket.prompt_estimate) == (STORED_READS, None, 1)
        assert (ticket.slot.model, ticket.slot.waited_s, ticket.slot.units, ticket.slot.released) == (
            STORED_READS,
            0.0,
            0,
            True,
        )
        assert p.snapshot() == {"live_tickets": 1, "queued": 0, "in_flight": 0}
        await ticket.release(stored_read_usage(40))
        assert ticket.charged_tokens == 10 and p.snapshot()["live_tickets"] == 0
        assert p.queue.models() == []  # a read never entered a model's queue
    finally:
        await p.aclose()


async def test_a_read_reserves_one_request_one_unit_and_one_token_of_its_tenant():
    p = await make(config(max_concurrent=2, tokens_per_minute=100))
    try:
        who = await principal(p)
        steps = Steps()
        make_current(steps)
        first = await p.admit_read(who)
        assert steps.names == ["switchyard.quota"]
        assert first.reservation is not None
        assert (first.reservation.tenant, first.reservation.tokens, first.reservation.units) == ("a", 1, 1)
        second = await p.admit_read(who)  # two units of two: a read holds one
        with pytest.raises(GatewayError) as refused:
            await p.admit_read(who)
        assert (refused.value.status, refused.value.code) == (429, "concurrency_limit_exceeded")
        await first.release(stored_read_usage(4 * 90))
        assert first.charged_tokens == 90
        await second.release(stored_read_usage(0))
        # 91 of 100 tokens spent (a read of nothing costs one): two more reads fit (one token
        # reserved each) and spend 5 each, past the limit, so the next is refused before the read
        held = [await p.admit_read(who) for _ in range(2)]
        for t in held:
            await t.release(stored_read_usage(4 * 5))
        with pytest.raises(GatewayError) as spent:
            await p.admit_read(who)
        assert (spent.value.status, spent.value.code) == (429, "rate_limit_exceeded")
    finally:
        await p.aclose()


async def test_a_read_counts_against_the_requests_per_minute():
    p = await make(config(requests_per_minute=2))
    try:
        who = await principal(p)
        for _ in range(2):
            await (await p.admit_read(who)).release(stored_read_usage(1))
        with pytest.raises(GatewayError) as refused:
            await p.admit_read(who)
        assert refused.value.code == "rate_limit_exceeded" and "requests per minute" in refused.value.message
    finally:
        await p.aclose()


async def test_the_estimate_is_sized_only_when_a_limit_needs_it_and_then_once():
    calls: list[int] = []

    def estimate() -> int:
        calls.append(1)
        return 50

    free = await make({"quota_store": {"kind": "memory"}})
    try:
        ticket = await free.admit(await principal(free, "x"), "m", request(10), estimate, never_gone)
        assert calls == [] and ticket.prompt_estimate == 0 and ticket.reservation is None
        await ticket.release(None)
    finally:
        await free.aclose()
    limited = await make(config(tokens_per_minute=1000))
    try:
        ticket = await limited.admit(await principal(limited), "m", request(10), estimate, never_gone)
        assert calls == [1] and ticket.prompt_estimate == 50
        assert ticket.reservation is not None and ticket.reservation.tokens == 60  # the prompt and max_tokens
        await ticket.release(None, None)
    finally:
        await limited.aclose()


@pytest.mark.parametrize(("max_concurrent", "held"), [(1, 1), (2, 2), (5, 3)])
async def test_a_call_s_size_is_held_up_to_the_tenant_s_concurrency_and_never_refused_for_it(max_concurrent, held):
    p = await make(config(max_concurrent=max_concurrent))
    try:
        ticket = await p.admit(await principal(p), "m", request(), 1, never_gone, size_units=3)
        assert ticket.reservation is not None and ticket.reservation.units == held
        await ticket.release(None)
    finally:
        await p.aclose()


async def test_a_read_still_held_at_a_graceful_stop_gives_its_lease_back():
    p = await make(config(max_concurrent=1))
    who = await principal(p)
    ticket = await p.admit_read(who)
    await p.aclose()
    assert ticket.released and ticket.charged_tokens == 1  # finished but nobody counted: the reservation
    assert p.snapshot()["live_tickets"] == 0
