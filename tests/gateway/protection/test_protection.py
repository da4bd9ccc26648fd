"""gateway/protection/gate.py called directly, as the HTTP handlers call it: auth,
admission, release in every cancellation phase and shared Redis state. Redis
going away: tests/gateway/protection/test_quota_store_outage.py; refusals, reset headers
and the max_tokens clamp: tests/gateway/protection/test_quota_details.py."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from adapters.base import Usage
from adapters.errors import GatewayError
from gateway.config.schema import ConfigError, parse_config
from gateway.protection.gate import Protection
from gateway.serving.phases import CancelPhase
from tests.gateway.protection_kit import (
    KEY_B,
    config,
    make,
    never_gone,
    one_running,
    principal,
    queued_until_gone,
    refusal,
    request,
    with_named_key,
)
from tests.gateway.protection_kit import sample as _sample


async def test_admit_and_release_return_headers_and_leave_nothing_held():
    p = await make(config(requests_per_minute=10, tokens_per_minute=10_000, max_concurrent=2))
    who = await principal(p)
    t = await p.admit(who, "m", request(), 20, never_gone)
    assert t.headers["x-ratelimit-limit-requests"] == "10"
    assert t.headers["x-ratelimit-remaining-requests"] == "9"
    assert t.headers["x-ratelimit-remaining-tokens"] == str(10_000 - 120)
    assert p.snapshot() == {"live_tickets": 1, "queued": 0, "in_flight": 1}
    await t.release(Usage(prompt_tokens=20, completion_tokens=5))
    await t.release(Usage(prompt_tokens=20, completion_tokens=5))  # idempotent
    assert p.snapshot() == {"live_tickets": 0, "queued": 0, "in_flight": 0}
    assert await p.leases.local.concurrent("a", "t") == 0
    t2 = await p.admit(who, "m", request(), 20, never_gone)
    # the first request's unused reservation came back: only its 25 real tokens count
    assert t2.headers["x-ratelimit-remaining-tokens"] == str(10_000 - 25 - 120)
    await t2.release(None)
    await p.aclose()


async def test_rpm_exhausted_is_429_with_retry_after_and_headers():
    p = await make(config(requests_per_minute=2))
    who = await principal(p)
    for _ in range(2):
        await (await p.admit(who, "m", request(), 1, never_gone)).release(None)
    e = await refusal(p, who, "m", request(), 1)
    assert e.status == 429 and e.code == "rate_limit_exceeded"
    assert 0 < e.retry_after <= 60
    assert e.headers["x-ratelimit-remaining-requests"] == "0"
    await p.aclose()


async def test_a_request_that_can_never_fit_says_so_without_retry_after():
    # 400, not 429: no wait makes it fit, and every 429 gets Retry-After (gateway/http/envelope.py).
    p = await make(config(tokens_per_minute=500))
    error = await refusal(p, await principal(p), "m", request(max_tokens=1000), 10)
    assert error.status == 400 and error.retry_after is None
    assert error.type == "invalid_request_error" and error.code == "request_exceeds_tpm_limit"
    assert "Request too large" in error.message
    assert "limit is 500" in error.message and "reserves 1010 tokens" in error.message
    assert "max_tokens to at most 490" in error.message
    await p.aclose()


async def test_no_max_tokens_reserves_the_tenant_cap():
    p = await make(config(tokens_per_minute=10_000, max_tokens_cap=300))
    t = await p.admit(await principal(p), "m", request(max_tokens=None, n=2), 10, never_gone)
    assert t.reservation.tokens == 10 + 2 * 300
    await t.release(None)
    three_prompts = await p.admit(await principal(p), "m", request(max_tokens=50, n=2), 30, never_gone, choices=6)
    assert three_prompts.reservation.tokens == 30 + 6 * 50
    await three_prompts.release(None)
    await p.aclose()


async def test_model_outside_the_tenant_list_is_403():
    p = await make(config())
    error = await refusal(p, await principal(p), "other", request(), 1)
    assert error.status == 403
    await p.aclose()


async def test_tenant_without_limits_touches_no_store():
    cfg = config()
    cfg["tenants"]["b"] = {"models": ["*"]}
    p = await make(cfg)
    t = await p.admit(await principal(p, KEY_B), "m", request(), 1, never_gone)
    assert t.reservation is None and t.headers == {}
    await t.release(None)
    await p.aclose()


@pytest.mark.parametrize("phase", [ph for ph in CancelPhase if ph is not CancelPhase.QUEUED])
async def test_cancel_in_each_dispatched_phase_frees_everything_and_charges_partial_usage(phase):
    p = await make(config(tokens_per_minute=10_000, max_concurrent=1))
    who = await principal(p)
    t = await p.admit(who, "m", request(max_tokens=500), 40, never_gone)
    partial = Usage(prompt_tokens=40, completion_tokens=7) if phase == "mid_stream" else None
    await t.release(partial, phase)
    assert p.snapshot() == {"live_tickets": 0, "queued": 0, "in_flight": 0}
    assert await p.leases.local.concurrent("a", "t") == 0
    expected = 47 if phase == "mid_stream" else 40  # partial usage, or the prompt it may have read
    assert t.charged_tokens == expected
    t2 = await p.admit(who, "m", request(max_tokens=0), 0, never_gone)
    assert t2.headers["x-ratelimit-remaining-tokens"] == str(10_000 - expected)
    await t2.release(None)
    await p.aclose()


async def test_client_leaving_while_queued_is_499_and_refunds_everything():
    p, who, holder = await one_running(config(tokens_per_minute=10_000, max_concurrent=5), 10)
    task, gone = await queued_until_gone(p, who, 10)
    assert p.snapshot()["queued"] == 1
    assert await p.leases.local.concurrent("a", "t") == 2  # the queued one holds its lease
    gone.set()
    with pytest.raises(GatewayError) as exc:
        await asyncio.wait_for(task, 1)
    assert exc.value.status == 499 and exc.value.code == "client_closed"
    assert exc.value.cancelled_phase == CancelPhase.QUEUED  # what the one cancellation counter reads
    await holder.release(Usage(10, 0))
    assert p.snapshot() == {"live_tickets": 0, "queued": 0, "in_flight": 0}
    assert await p.leases.local.concurrent("a", "t") == 0
    await p.aclose()


async def test_task_cancelled_while_queued_frees_its_lease():
    p, who, holder = await one_running(config(max_concurrent=5), 10)
    task = asyncio.create_task(p.admit(who, "m", request(), 10, never_gone))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await p.leases.local.concurrent("a", "t") == 1
    await holder.release(None)
    assert p.snapshot() == {"live_tickets": 0, "queued": 0, "in_flight": 0}
    await p.aclose()


async def test_full_queue_refunds_the_request_it_turned_away():
    cfg = config(requests_per_minute=100)
    cfg["admission"] = {"max_queue": 0, "max_queue_wait_s": 1, "full_status": 503}
    p, who, holder = await one_running(cfg)
    error = await refusal(p, who, "m", request(), 1)
    assert error.status == 503 and error.retry_after >= 1
    await holder.release(None)
    t = await p.admit(who, "m", request(), 1, never_gone)
    assert t.headers["x-ratelimit-remaining-requests"] == "98"  # the refused one did not count
    await t.release(None)
    await p.aclose()


async def test_two_replicas_share_concurrency_through_redis(redis_server):
    cfg = config({"kind": "redis", "url": redis_server.url}, max_concurrent=3)
    a, b = await make(cfg), await make(cfg)
    who = await principal(a)
    held = [
        await a.admit(who, "m", request(), 1, never_gone),
        await b.admit(who, "m", request(), 1, never_gone),
        await a.admit(who, "m", request(), 1, never_gone),
    ]
    error = await refusal(b, who, "m", request(), 1)
    assert error.code == "concurrency_limit_exceeded"
    await held[0].release(None)
    held[0] = await b.admit(who, "m", request(), 1, never_gone)
    for t in held:
        await t.release(None)
    assert await a.leases.store.concurrent("a", "t") == 0
    await a.aclose()
    await b.aclose()


# Long enough that the live ticket's heartbeat (every TTL / 3) keeps its lease through
# a loaded machine's stalls (up to 2/3 of it), short enough for a quick test.
CRASH_TTL_S = 1.2


async def test_leases_of_a_crashed_replica_expire_and_live_ones_are_kept(redis_server):
    cfg = config({"kind": "redis", "url": redis_server.url, "lease_ttl_s": CRASH_TTL_S}, max_concurrent=2)
    alive, doomed = await make(cfg), await make(cfg)
    who = await principal(alive)
    kept = await alive.admit(who, "m", request(), 1, never_gone)
    await doomed.admit(who, "m", request(), 1, never_gone)
    doomed.leases._heartbeat_task.cancel()  # the replica dies: no release, no more heartbeats
    t0 = time.monotonic()
    while await alive.leases.store.concurrent("a", "t") > 1:
        # Redis expires it by its own clock; the margin is for this loop on a loaded machine.
        assert time.monotonic() - t0 < CRASH_TTL_S + 3, "the dead replica's lease outlived its TTL"
        await asyncio.sleep(0.05)
    await asyncio.sleep(CRASH_TTL_S * 1.5)  # beyond the TTL: the live ticket's heartbeat kept it
    assert await alive.leases.store.concurrent("a", "t") == 1
    await kept.release(None)
    await alive.aclose()
    await doomed.leases.store.aclose()


async def test_auth_off_needs_saying_so_on_a_public_address():
    with pytest.raises(ConfigError):
        Protection.from_config(parse_config({"listen": {"host": "0.0.0.0"}}), CollectorRegistry())
    Protection.from_config(parse_config({"listen": {"host": "0.0.0.0"}, "auth": {"mode": "none"}}), CollectorRegistry())
    Protection.from_config(parse_config({}), CollectorRegistry())  # loopback default


async def test_state_gauges_are_exported():
    from prometheus_client import generate_latest

    registry = CollectorRegistry()
    p = Protection(parse_config(config(max_concurrent=4)), registry)
    await p.start()
    t = await p.admit(await principal(p), "m", request(), 1, never_gone)
    text = generate_latest(registry).decode()
    assert 'switchyard_admission_inflight{model="m"} 1.0' in text
    assert "switchyard_live_tickets 1.0" in text
    await t.release(None)
    assert 'switchyard_admission_inflight{model="m"} 0.0' in generate_latest(registry).decode()
    await p.aclose()


async def test_a_ticket_dropped_without_release_frees_its_slot_and_lease():
    import gc

    p = await make(config(max_concurrent=1))
    p.set_capacity_provider(lambda model: 1)
    who = await principal(p)
    await p.admit(who, "m", request(), 1, never_gone)  # the ticket is dropped on the floor
    gc.collect()
    await asyncio.sleep(0.05)
    assert p.snapshot() == {"live_tickets": 0, "queued": 0, "in_flight": 0}
    assert await p.leases.local.concurrent("a", "t") == 0
    assert _sample(p, "switchyard_protection_leaked_tickets_total", {}) == 1
    t = await asyncio.wait_for(p.admit(who, "m", request(), 1, never_gone), 1)
    await t.release(None)
    assert _sample(p, "switchyard_protection_leaked_tickets_total", {}) == 1  # a released one is not counted
    await p.aclose()


async def test_a_key_limit_applies_to_that_key_only():
    p, narrow = await with_named_key("narrow", {"requests_per_minute": 100}, requests_per_minute=1)
    await (await p.admit(narrow, "m", request(), 1, never_gone)).release(None)
    error = await refusal(p, narrow, "m", request(), 1)
    assert error.status == 429 and "key narrow" in error.message
    assert error.headers["x-ratelimit-limit-requests"] == "1"
    t = await p.admit(await principal(p), "m", request(), 1, never_gone)  # the tenant's other key
    assert t.headers["x-ratelimit-remaining-requests"] == "98"  # both requests counted for the tenant
    await t.release(None)
    await p.aclose()


async def test_auth_off_from_the_environment_counts_as_explicit():
    from gateway.config.schema import load_config

    cfg = load_config(None, env={"SWITCHYARD_HOST": "0.0.0.0", "SWITCHYARD_AUTH_MODE": "none"})
    Protection.from_config(cfg, CollectorRegistry())
    with pytest.raises(ConfigError):
        Protection.from_config(load_config(None, env={"SWITCHYARD_HOST": "0.0.0.0"}), CollectorRegistry())


async def test_without_auth_the_anonymous_tenant_limits_apply():
    p = await make({"auth": {"mode": "none"}, "tenants": {"anonymous": {"requests_per_minute": 1}}})
    who = await p.authenticate({})
    await (await p.admit(who, "m", request(), 1, never_gone)).release(None)
    error = await refusal(p, who, "m", request(), 1)
    assert error.status == 429
    await p.aclose()


async def test_a_lease_held_in_the_queue_outlives_the_ttl():
    # A TTL of 1 s: the heartbeat (every TTL / 3) keeps the lease through stalls of up to
    # 0.6 s on a loaded machine (0.3 s left only 0.2 s).
    p, who, holder = await one_running(config({"kind": "memory", "lease_ttl_s": 1.0}, max_concurrent=5))
    queued = asyncio.create_task(p.admit(who, "m", request(), 1, never_gone))
    await asyncio.sleep(2.0)  # two TTLs in the queue
    assert p.snapshot()["queued"] == 1
    assert await p.leases.local.concurrent("a", "t") == 2  # the queued request still holds its slot
    await holder.release(None)
    t = await asyncio.wait_for(queued, 10)
    await t.release(None)
    assert await p.leases.local.concurrent("a", "t") == 0
    await p.aclose()


async def test_without_auth_and_tenants_protection_is_there_and_limits_nothing():
    # Protection is always present; with `auth.mode: none` and no tenants every
    # request is the anonymous tenant's, with no reservation and no limit.
    p = await make({"models": {"m": {"backends": [{"name": "b", "adapter": "openai", "url": "http://x/v1"}]}}})
    who = await p.authenticate({})
    assert p.leases.scopes_for(who) == ()
    held = [await p.admit(who, "m", request(max_tokens=10_000, n=8), 100_000, never_gone) for _ in range(50)]
    assert all(t.reservation is None and t.headers == {} for t in held)
    # in_flight counts generations: 50 requests of n=8 each
    assert p.snapshot() == {"live_tickets": 50, "queued": 0, "in_flight": 400}
    for t in held:
        await t.release(Usage(1, 1))
    assert p.snapshot() == {"live_tickets": 0, "queued": 0, "in_flight": 0}
    await p.aclose()
