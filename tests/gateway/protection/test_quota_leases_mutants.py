"""gateway/protection/quota_leases.py in process, on a scripted shared store: an
in-memory store that calls itself "redis" (so it is the shared one) and can be told
to stop answering, recording every call. What the outage paths do (the fail policy,
the releases kept and replayed, the heartbeat and what it refreshes where) and what
each refusal tells the client, at and around each boundary of `_refusal`."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from adapters.errors import GatewayError
from gateway.config.schema import parse_config
from gateway.protection.metrics import ProtectionMetrics
from gateway.protection.quota_leases import PendingRelease, QuotaLeases
from policies.auth import Principal
from policies.quota import QuotaAsk, QuotaStoreUnavailable, Reservation, TokenBudget
from stores.quota_memory import MemoryQuotaStore
from stores.quota_redis import RedisQuotaStore
from tests.gateway.protection_kit import config

TTL_S = 0.3  # heartbeat every 0.1 s
WHO = Principal("a", None, ["*"], 1)
BUDGET = TokenBudget(prompt=10, per_choice=5, choices=1, from_cap=False)


class ScriptedStore(MemoryQuotaStore):
    """The shared store of these tests: answers like the memory store until `down`."""

    kind = "redis"

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.message = "refused"
        self.fail_releases = 0  # the next N releases fail even while up
        self.calls: list[tuple] = []
        self.on_heartbeat = lambda: None

    def _answer(self, *call) -> None:
        self.calls.append(call)
        if self.down:
            raise QuotaStoreUnavailable(self.message)

    async def take(self, ask: QuotaAsk) -> Reservation:
        self._answer("take", ask)
        return await super().take(ask)

    async def release(self, reservation, used_tokens, refund_request=False, *, replay=False) -> None:
        self._answer("release", reservation.lease_id, used_tokens, refund_request, replay)
        if self.fail_releases:
            self.fail_releases -= 1
            raise QuotaStoreUnavailable(self.message)
        await super().release(reservation, used_tokens, refund_request, replay=replay)

    async def heartbeat(self, reservations, lease_ttl_ms) -> None:
        self._answer("heartbeat", [r.lease_id for r in reservations], lease_ttl_ms)
        self.on_heartbeat()
        await super().heartbeat(reservations, lease_ttl_ms)

    async def ping(self) -> None:
        self._answer("ping")

    def named(self, name: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == name]


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def leases_for(policy: str = "fail_open", **tenant) -> tuple[QuotaLeases, ScriptedStore, Clock, CollectorRegistry]:
    tenant.setdefault("max_concurrent", 50)  # a scope to hold leases in
    registry = CollectorRegistry()
    clock = Clock()
    store = ScriptedStore()
    cfg = parse_config(config({"kind": "memory", "on_unavailable": policy, "lease_ttl_s": TTL_S}, **tenant))
    leases = QuotaLeases(cfg, ProtectionMetrics(registry), store=store, local_store=MemoryQuotaStore(clock_ms=clock))
    return leases, store, clock, registry


def metric(registry: CollectorRegistry, name: str, **labels) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


async def until(condition, bound_s: float = 10.0) -> None:
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        await asyncio.sleep(0.01)


async def reserve(leases: QuotaLeases, units: int = 1, budget: TokenBudget = BUDGET) -> Reservation:
    return await leases.reserve(WHO, leases.scopes_for(WHO), budget, units)


# ---- construction ------------------------------------------------------------------


def test_a_redis_config_builds_the_shared_store_and_memory_uses_the_local_one() -> None:
    cfg = parse_config(config({"kind": "redis", "url": "redis://127.0.0.1:1/0", "key_prefix": "pfx"}))
    leases = QuotaLeases(cfg, ProtectionMetrics(CollectorRegistry()), window_ms=120_000, bucket_ms=2_000)
    assert isinstance(leases.store, RedisQuotaStore) and leases.shared
    assert (leases.store.prefix, leases.store.window_ms, leases.store.bucket_ms) == ("pfx", 120_000, 2_000)
    assert leases.where == "redis://127.0.0.1:1/0" and leases.lease_ttl_ms == 30_000
    assert (leases.local.window_ms, leases.local.bucket_ms) == (120_000, 2_000)
    assert leases.store.redis._pool.connection_kwargs["socket_timeout"] == 1.0  # quota_store.timeout_s
    memory = QuotaLeases(parse_config(config()), ProtectionMetrics(CollectorRegistry()))
    assert memory.store is memory.local and not memory.shared and memory.where == "memory"


async def test_a_new_sentinel_master_wakes_the_heartbeat() -> None:
    store = {"kind": "redis", "mode": "sentinel", "sentinels": ["127.0.0.1:1"], "service_name": "q", "timeout_s": 0.2}
    leases = QuotaLeases(parse_config(config(store)), ProtectionMetrics(CollectorRegistry()))
    pool = leases.store.redis._master_pool
    assert (
        pool.connection_kwargs["socket_timeout"] == 0.2 and leases.where == "redis sentinel master 'q' via 127.0.0.1:1"
    )
    pool.on_master_change()
    assert leases._master_changed.is_set()


# ---- the fail policy -----------------------------------------------------------------


@pytest.mark.parametrize(("message", "reason"), [("refused", "refused"), ("", "QuotaStoreUnavailable")])
async def test_fail_closed_is_a_503_and_the_unanswered_lease_waits_for_the_store(caplog, message, reason) -> None:
    leases, store, _, registry = leases_for("fail_closed", max_concurrent=5)
    store.down, store.message = True, message
    with caplog.at_level(logging.ERROR, "switchyard.protection"), pytest.raises(GatewayError) as exc:
        await reserve(leases, units=2)
    e = exc.value
    assert (e.status, e.code, e.retry_after) == (503, "quota_store_unavailable", leases.health.max_delay_s)
    assert e.message == "The quota store is unavailable; the request was not admitted. Retry shortly."
    assert metric(registry, "switchyard_quota_decisions_total", result="store_unavailable") == 1
    assert metric(registry, "switchyard_quota_store_unavailable_total", policy="fail_closed") == 1
    assert metric(registry, "switchyard_quota_check_seconds_count", store="memory") == 1
    assert not leases.health.up and metric(registry, "switchyard_quota_store_up") == 0
    assert f"quota store memory unreachable ({reason}); applying fail_closed until it answers" in logged(caplog)
    # What the store may run when it wakes: the lease only (no tokens), to be dropped.
    [orphan] = leases.pending
    take = store.named("take")[0][1]
    assert orphan == PendingRelease(
        Reservation("a", take.scopes, take.lease_id, bucket=-1, tokens=0, store="redis", units=2), 0
    )
    await leases.aclose()


async def test_fail_open_takes_the_same_reservation_from_the_local_store() -> None:
    leases, store, clock, registry = leases_for(max_concurrent=5)
    store.down = True
    r = await reserve(leases, units=3)
    assert r.store == "local-fallback" and r.tokens == BUDGET.total and r.tenant == "a" and r.units == 3
    assert await leases.local.concurrent("a", "t") == 3
    assert leases.local._leases[("a", "t")][r.lease_id] == clock.ms + int(TTL_S * 1000)
    assert leases.pending[0].reservation.lease_id == r.lease_id
    assert metric(registry, "switchyard_quota_store_unavailable_total", policy="fail_open") == 1
    assert metric(registry, "switchyard_quota_decisions_total", result="admitted") == 1
    # Known down: the next one goes local straight away, the store is not asked.
    again = await reserve(leases)
    assert len(store.named("take")) == 1 and await leases.local.concurrent("a", "t") == 4
    assert len(again.lease_id) == 32 and again.lease_id in leases.local._leases[("a", "t")]
    await leases.aclose()


async def test_one_unit_unless_told_otherwise() -> None:
    leases, store, _, _ = leases_for()
    r = await leases.reserve(WHO, leases.scopes_for(WHO), BUDGET)
    assert r.units == 1 and await store.concurrent("a", "t") == 1
    await leases.aclose()


async def test_a_store_down_at_start_is_marked_down_saying_so(caplog) -> None:
    leases, store, _, _ = leases_for()
    store.down = True
    with caplog.at_level(logging.ERROR, "switchyard.protection"):
        await leases.start(tuple)
    assert not leases.health.up
    assert "quota store memory unreachable (unreachable at start: refused); applying fail_open until it answers" in (
        logged(caplog)
    )
    await leases.aclose()


async def test_a_shared_store_that_answers_takes_every_unit() -> None:
    leases, store, _, registry = leases_for(max_concurrent=5)
    r = await reserve(leases, units=3)
    assert r.store == "redis" and await store.concurrent("a", "t") == 3 and r.units == 3
    assert store.named("take")[0][1].lease_ttl_ms == int(TTL_S * 1000)
    assert metric(registry, "switchyard_quota_check_seconds_count", store="redis") == 1
    assert 0 < metric(registry, "switchyard_quota_check_seconds_sum", store="redis") < 5  # its time, not the clock's
    await leases.aclose()


# ---- releases --------------------------------------------------------------------------


async def test_a_release_reaches_the_store_with_its_tokens_and_refund() -> None:
    leases, store, _, _ = leases_for()
    r = await reserve(leases)
    await leases.release(r, 7, True)
    assert store.named("release") == [("release", r.lease_id, 7, True, False)]
    await leases.aclose()


@pytest.mark.parametrize(("message", "reason"), [("gone", "gone"), ("", "QuotaStoreUnavailable")])
async def test_a_release_the_store_does_not_take_is_kept_and_marks_it_down(caplog, message, reason) -> None:
    leases, store, _, registry = leases_for()
    r = await reserve(leases)
    store.down, store.message = True, message
    with caplog.at_level(logging.ERROR, "switchyard.protection"):
        await leases.release(r, 7, True)
    assert list(leases.pending) == [PendingRelease(r, 7, True)]
    assert metric(registry, "switchyard_quota_store_unavailable_total", policy="release") == 1
    assert not leases.health.up
    assert f"quota store memory unreachable ({reason}); applying fail_open until it answers" in logged(caplog)
    # Known down: kept without asking.
    await leases.release(r, 3, True)
    assert list(leases.pending)[1] == PendingRelease(r, 3, True) and len(store.named("release")) == 1
    await leases.aclose()


async def test_kept_releases_are_replayed_in_order_once_the_store_answers(caplog) -> None:
    leases, store, _, registry = leases_for()
    first, second = await reserve(leases), await reserve(leases)
    store.down = True
    await leases.release(first, 4, True)
    await leases.release(second, 9, False)
    store.down = False
    with caplog.at_level(logging.WARNING, "switchyard.protection"):
        await until(lambda: leases.health.up and not leases.pending)
        await until(lambda: leases._replay_task is not None and leases._replay_task.done())
    assert leases._replay_task.get_name() == "quota-replay"
    assert store.named("release")[-2:] == [
        ("release", first.lease_id, 4, True, True),
        ("release", second.lease_id, 9, False, True),
    ]
    assert await store.concurrent("a", "t") == 0 and not leases.local._leases.get(("a", "t"))
    [back] = [m for m in logged(caplog) if "answers again" in m]
    assert back.startswith("quota store memory answers again after ") and back.endswith(" s; shared limits apply again")
    assert metric(registry, "switchyard_quota_store_transitions_total", to="up") == 1
    assert metric(registry, "switchyard_quota_store_up") == 1
    await leases.aclose()


@pytest.mark.parametrize(("message", "reason"), [("again", "again"), ("", "QuotaStoreUnavailable")])
async def test_a_replay_the_store_refuses_stays_first_and_marks_it_down(caplog, message, reason) -> None:
    leases, store, _, _ = leases_for()
    first, second = await reserve(leases), await reserve(leases)
    store.down = True
    await leases.release(first, 4)
    await leases.release(second, 9)
    store.down, store.message, store.fail_releases = False, message, 1
    with caplog.at_level(logging.ERROR, "switchyard.protection"):
        await until(lambda: store.fail_releases == 0)
        await until(lambda: leases._replay_task is not None and leases._replay_task.done())
    assert list(leases.pending) == [PendingRelease(first, 4), PendingRelease(second, 9)]
    assert not leases.health.up and caplog.text.count(f"unreachable ({reason})") == 1
    await leases.aclose()


# ---- the heartbeat ---------------------------------------------------------------------


async def test_the_heartbeat_refreshes_shared_leases_every_third_of_the_ttl() -> None:
    leases, store, _, _ = leases_for()
    r = await reserve(leases)
    await leases.start(lambda: [r])
    assert leases._heartbeat_task.get_name() == "lease-heartbeat"
    await asyncio.sleep(0.9)  # every 0.1 s: several, however loaded the machine
    beats = store.named("heartbeat")
    assert len(beats) >= 2 and beats[0] == ("heartbeat", [r.lease_id], int(TTL_S * 1000))
    await leases.stop_heartbeat()
    assert leases._heartbeat_task.done()
    count = len(store.named("heartbeat"))
    await asyncio.sleep(0.3)
    assert len(store.named("heartbeat")) == count
    await leases.aclose()


async def test_a_heartbeat_cancelled_as_a_new_master_wakes_it_stops() -> None:
    # Closing cancels the heartbeat; a cancel that lands as Sentinel names a new master (the
    # event set in the same loop iteration) must stop it, not be lost to another round.
    leases, *_ = leases_for()
    await leases.start(tuple)
    task = leases._heartbeat_task
    for _ in range(3):
        await asyncio.sleep(0)  # the heartbeat waits on the event
    leases._master_changed.set()
    task.cancel()
    for _ in range(3):
        await asyncio.sleep(0)  # a cancel that holds ends it in one
    assert task.cancelled()
    await leases.aclose()


async def test_fallback_leases_are_refreshed_in_the_local_store_and_shared_ones_are_not() -> None:
    leases, store, clock, _ = leases_for()
    shared = await reserve(leases)
    store.down = True
    fallback = await reserve(leases)
    store.down = False
    await until(lambda: leases.health.up)
    leases.queued[fallback.lease_id] = fallback
    clock.ms += 5_000
    await leases.start(lambda: [shared])
    ttl = int(TTL_S * 1000)
    await until(lambda: leases.local._leases[("a", "t")].get(fallback.lease_id) == clock.ms + ttl)
    assert shared.lease_id not in leases.local._leases[("a", "t")]
    await until(lambda: any(c[1] == [shared.lease_id] for c in store.named("heartbeat")))
    assert all(fallback.lease_id not in c[1] for c in store.named("heartbeat"))
    await leases.aclose()


async def test_no_heartbeat_is_sent_to_a_store_known_down() -> None:
    leases, store, _, registry = leases_for()
    r = await reserve(leases)
    store.down = True
    await leases.release(r, 1)  # marks it down
    await leases.start(lambda: [r])
    await asyncio.sleep(0.5)
    assert store.named("heartbeat") == [] and leases.pending
    assert metric(registry, "switchyard_quota_store_unavailable_total", policy="heartbeat") == 0
    await leases.aclose()


@pytest.mark.parametrize(("message", "reason"), [("hb", "hb"), ("", "QuotaStoreUnavailable")])
async def test_a_heartbeat_the_store_does_not_take_marks_it_down(caplog, message, reason) -> None:
    leases, store, _, registry = leases_for()
    r = await reserve(leases)
    store.message = message

    def fail() -> None:
        raise QuotaStoreUnavailable(store.message)

    store.on_heartbeat = fail
    with caplog.at_level(logging.ERROR, "switchyard.protection"):
        await leases.start(lambda: [r])
        await until(lambda: not leases.health.up)
    assert metric(registry, "switchyard_quota_store_unavailable_total", policy="heartbeat") == 1
    assert f"quota store memory unreachable ({reason}); applying fail_open until it answers" in logged(caplog)
    await leases.aclose()


async def test_the_heartbeat_outlives_an_unexpected_error_and_says_so(caplog) -> None:
    leases, store, _, _ = leases_for()
    r = await reserve(leases)
    failures = [RuntimeError("bug")]

    def maybe_fail() -> None:
        if failures:
            raise failures.pop()

    store.on_heartbeat = maybe_fail
    with caplog.at_level(logging.ERROR, "switchyard.protection"):
        await leases.start(lambda: [r])
        await until(lambda: len(store.named("heartbeat")) >= 2)
    assert "lease heartbeat failed" in logged(caplog) and leases.health.up
    await leases.aclose()


async def test_the_heartbeat_sends_kept_releases_and_goes_on() -> None:
    leases, store, _, _ = leases_for()
    held, gone = await reserve(leases), await reserve(leases)
    leases.pending.append(PendingRelease(gone, 2, True))  # kept while down; the store answers now
    await leases.start(lambda: [held])
    await until(lambda: not leases.pending)
    assert ("release", gone.lease_id, 2, True, True) in store.calls
    beats = len(store.named("heartbeat"))
    await until(lambda: len(store.named("heartbeat")) > beats + 1)  # the loop went on
    await leases.aclose()


async def test_a_lease_released_while_its_refresh_was_on_the_way_is_dropped_again() -> None:
    leases, store, _, _ = leases_for()
    stays, leaves = await reserve(leases), await reserve(leases)
    held = [stays, leaves]

    def released_meanwhile() -> None:
        if leaves in held:
            held.remove(leaves)

    store.on_heartbeat = released_meanwhile
    leases._held = lambda: list(held)
    await leases.reassert_leases()
    assert store.named("release") == [("release", leaves.lease_id, leaves.tokens, False, False)]
    assert await store.concurrent("a", "t") == 1
    await leases.aclose()
