"""Protection's details the main tests leave open: what each refusal says, what a
ticket charges in each case, what a client leaving from the queue is charged, what
a reload puts in force (and refuses), the steps it traces, and how a graceful
stop or a collected ticket gives everything back. In process, memory quota store."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from adapters.base import Usage
from adapters.errors import GatewayError
from gateway.config.schema import ConfigError, parse_config
from gateway.observe.context import NO_STEP, NO_TRACE, NoTrace, make_current
from gateway.protection.gate import DEFAULT_COMPLETION_RESERVATION, Protection
from gateway.serving.phases import CancelPhase
from stores.quota_memory import MemoryQuotaStore
from tests.gateway.protection_kit import (
    config,
    make,
    never_gone,
    one_running,
    principal,
    queued_until_gone,
    refusal,
    request,
    sample,
)


class Steps(NoTrace):
    """A trace that records the steps it is asked to time."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def step(self, name: str):
        self.names.append(name)
        return NO_STEP


# ---- what a ticket charges ---------------------------------------------------------------------------


@pytest.mark.parametrize("phase", [None, *CancelPhase])
async def test_without_a_reservation_nothing_is_charged_in_any_phase(phase):
    cfg = config()
    cfg["tenants"]["b"] = {"models": ["*"]}  # no limits: no reservation
    p = await make(cfg)
    t = await p.admit(await principal(p, "sk-sy-tenant-b-key"), "m", request(), 40, never_gone)
    assert t.reservation is None
    assert t.tokens_to_charge(None, phase) == 0
    assert t.tokens_to_charge(Usage(3, 4), phase) == 7  # a count is charged as it is
    await t.release(None, phase)
    assert t.charged_tokens == 0
    await p.aclose()


async def test_a_reservation_is_charged_whole_unless_counted_or_left_in_the_queue():
    p = await make(config(tokens_per_minute=10_000))
    t = await p.admit(await principal(p), "m", request(max_tokens=100), 40, never_gone)
    assert t.reservation.tokens == 140
    assert t.tokens_to_charge(None, None) == 140  # finished, nobody counted: keep the reservation
    assert t.tokens_to_charge(None, CancelPhase.QUEUED) == 0  # never dispatched
    assert t.tokens_to_charge(None, CancelPhase.MID_STREAM) == 40  # the prompt it may have read
    assert t.tokens_to_charge(Usage(40, 2), CancelPhase.MID_STREAM) == 42
    await t.release(None)
    assert t.charged_tokens == 140
    await p.aclose()


async def test_a_client_leaving_the_queue_is_charged_nothing():
    p, who, holder = await one_running(config(tokens_per_minute=10_000, max_concurrent=5), 10)
    task, gone = await queued_until_gone(p, who, 10)
    gone.set()
    with pytest.raises(GatewayError):
        await asyncio.wait_for(task, 1)
    await holder.release(Usage(10, 0))
    t = await p.admit(who, "m", request(max_tokens=0), 0, never_gone)
    assert t.headers["x-ratelimit-remaining-tokens"] == str(10_000 - 10)  # only the holder's real 10
    await t.release(None)
    await p.aclose()


async def test_a_request_refused_by_the_full_queue_is_counted_by_model_and_code_with_the_headers():
    cfg = config(requests_per_minute=100, tokens_per_minute=10_000)
    cfg["admission"] = {"max_queue": 0, "max_queue_wait_s": 1}
    p, who, holder = await one_running(cfg)
    error = await refusal(p, who, "m", request(), 1)
    assert error.headers["x-ratelimit-limit-requests"] == "100"  # the tenant's state, for its retry
    # ...as it stands after the refund: only the holder counted, not the refused request.
    assert error.headers["x-ratelimit-remaining-requests"] == "99"
    labels = {"model": "m", "reason": error.code or str(error.status)}
    assert sample(p, "switchyard_admission_rejected_total", labels) == 1
    await holder.release(Usage(1, 0))
    t = await p.admit(who, "m", request(max_tokens=0), 0, never_gone)
    assert t.headers["x-ratelimit-remaining-tokens"] == str(10_000 - 1)  # the refused one charged nothing
    await t.release(None)
    await p.aclose()


async def test_the_queue_wait_is_observed_per_model_and_the_ticket_holds_the_tenants_reservation():
    p = await make(config(max_concurrent=5))
    who = await principal(p)
    t = await p.admit(who, "m", request(), 1, never_gone)
    assert sample(p, "switchyard_admission_wait_seconds_count", {"model": "m"}) == 1
    # whose it is: the reservation its release gives back and charges is the tenant's
    assert (t.reservation.tenant, t.model, t.prompt_estimate) == (who.tenant, "m", 1)
    await t.release(None)
    await p.aclose()


async def test_without_a_cap_the_default_completion_budget_is_reserved():
    p = await make(config(tokens_per_minute=100_000))
    t = await p.admit(await principal(p), "m", request(max_tokens=None), 10, never_gone)
    assert t.reservation.tokens == 10 + DEFAULT_COMPLETION_RESERVATION
    await t.release(None)
    await p.aclose()


# ---- the steps it traces ------------------------------------------------------------------------------


async def test_authentication_quota_and_queue_are_traced_steps():
    p = await make(config(requests_per_minute=10))
    steps = Steps()
    make_current(steps)
    try:
        t = await p.admit(await principal(p), "m", request(), 1, never_gone)
    finally:
        make_current(NO_TRACE)
    assert steps.names == ["switchyard.authenticate", "switchyard.quota", "switchyard.queue"]
    await t.release(None)
    await p.aclose()


# ---- a reload -------------------------------------------------------------------------------------------


async def test_a_reload_puts_tenants_and_queue_bounds_in_force_and_keeps_the_counters():
    p = await make(config(requests_per_minute=10))
    p.auth.keys.reload_errors = 3
    changed = config(requests_per_minute=10)
    changed["tenants"]["c"] = {"models": ["*"]}
    changed["admission"] = {"max_queue": 9, "max_queue_wait_s": 7, "full_status": 503}
    cfg = parse_config(changed)
    await p.reconfigure(cfg)
    assert p.config is cfg and p.leases.config is cfg
    assert "c" in p.auth.tenants and p.auth.keys.reload_errors == 3
    assert (p.queue.max_queue, p.queue.max_wait_s, p.queue.full_status) == (9, 7, 503)
    await p.aclose()


def opened_after_validation():
    """A config without auth that was valid on loopback, moved to a public address
    after validation (as a command line's host option may): parse_config never saw it."""
    cfg = parse_config({})
    cfg.listen.host = "0.0.0.0"
    return cfg


async def test_a_config_opened_after_validation_is_refused_at_start_and_at_a_reload():
    with pytest.raises(ConfigError, match="auth is not configured"):
        Protection.from_config(opened_after_validation(), CollectorRegistry())
    p = await make(config(requests_per_minute=10))
    before = p.config
    with pytest.raises(ConfigError, match="auth is not configured"):
        await p.reconfigure(opened_after_validation())
    assert p.config is before
    await p.aclose()


async def test_from_config_uses_the_local_store_it_is_given():
    store = MemoryQuotaStore()
    p = Protection.from_config(parse_config(config(requests_per_minute=10)), CollectorRegistry(), local_store=store)
    assert p.leases.local is store
    await p.aclose()


# ---- giving everything back ---------------------------------------------------------------------------


async def test_a_graceful_stop_releases_the_live_tickets_as_finished():
    p = await make(config(tokens_per_minute=10_000, max_concurrent=5))
    t = await p.admit(await principal(p), "m", request(max_tokens=100), 10, never_gone)
    await p.aclose()
    assert t.released and t.charged_tokens == 110  # no phase: charged as a finished request
    assert await p.leases.local.concurrent("a", "t") == 0


async def test_a_collected_ticket_is_logged_as_leaked(caplog):
    p = await make(config(max_concurrent=5))
    t = await p.admit(await principal(p), "m", request(), 1, never_gone)
    with caplog.at_level(logging.ERROR, logger="switchyard.protection"):
        del t
        gc.collect()
    assert any("dropped without release" in r.getMessage() for r in caplog.records)
    await asyncio.sleep(0)
    assert p.snapshot()["in_flight"] == 0
    await p.aclose()


# ---- what the queue is told ----------------------------------------------------------------------------


async def queued_in_order(p: Protection, who_by_name: dict, names: list[str]) -> list[str]:
    """Admit one request per name (in that order, each queued behind a holder of the
    model's one unit of capacity), then free the capacity one ticket at a time:
    the names in the order they were let through."""
    p.set_capacity_provider(lambda model: 1)
    holder = await p.admit(who_by_name[names[0]], "m", request(), 1, never_gone)
    order: list[str] = []

    async def enter(name: str) -> None:
        t = await p.admit(who_by_name[name], "m", request(), 1, never_gone)
        order.append(name)
        await asyncio.sleep(0.01)
        await t.release(None)

    tasks = []
    for name in names:
        tasks.append(asyncio.create_task(enter(name)))
        await asyncio.sleep(0.02)  # queued in this order
    await holder.release(None)
    await asyncio.wait_for(asyncio.gather(*tasks), 2)
    return order


async def test_tenants_take_turns_in_the_queue():
    p = await make(config(max_concurrent=10))
    who = {"a1": await principal(p), "a2": await principal(p), "b1": await principal(p, "sk-sy-tenant-b-key")}
    assert await queued_in_order(p, who, ["a1", "a2", "b1"]) == ["a1", "b1", "a2"]
    await p.aclose()


async def test_a_higher_tier_is_let_through_first():
    cfg = config(max_concurrent=10)
    cfg["tenants"]["b"]["tier"] = 2
    p = await make(cfg)
    who = {"a1": await principal(p), "a2": await principal(p), "b1": await principal(p, "sk-sy-tenant-b-key")}
    assert await queued_in_order(p, who, ["a1", "a2", "b1"]) == ["b1", "a1", "a2"]
    await p.aclose()


async def test_a_request_waits_in_the_queue_no_longer_than_its_deadline():
    p, who, holder = await one_running(config(max_concurrent=10))
    late = request()
    late.deadline = time.monotonic() + 0.2
    started = time.monotonic()
    error = await refusal(p, who, "m", late, 1)
    # The deadline's 504, not the queue's own limit (2 s, a 503 queue_timeout), and not before it.
    assert (error.status, error.code) == (504, "deadline_exceeded")
    assert time.monotonic() - started >= 0.2
    await holder.release(None)
    await p.aclose()


async def test_the_leases_held_count_the_running_and_the_queued():
    p, who, holder = await one_running(config(max_concurrent=5))
    task = asyncio.create_task(p.admit(who, "m", request(), 1, never_gone))
    await asyncio.sleep(0.05)
    assert p.snapshot()["queued"] == 1
    assert sample(p, "switchyard_quota_leases_held") == 2  # one running, one waiting in the queue
    await holder.release(None)
    await (await asyncio.wait_for(task, 1)).release(None)
    assert sample(p, "switchyard_quota_leases_held") == 0
    await p.aclose()
