"""The glue the HTTP handlers call: authenticate, then admit (quota reservation
and concurrency lease in one atomic step, then the model's fair queue), and at
the end release the ticket with the real usage.

Every resource a request holds (the lease, the reserved tokens, the queue slot)
belongs to its `Ticket`, and `Ticket.release` frees all of it, idempotently, in
every phase, cancelled or not. Leases are refreshed by a heartbeat while the
ticket lives, so a replica that dies stops refreshing and its leases expire
within `quota_store.lease_ttl_s` instead of leaking.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from adapters.base import GenerationRequest, Usage
from adapters.errors import GatewayError
from gateway.config import ConfigError, GatewayConfig, TenantConfig
from policies.admission import AdmissionQueue, CapacityFn, ClientGoneWhileQueued, Slot
from policies.auth import Authenticator, Principal, TenantRecord
from policies.quota import (
    BUCKET_MS,
    UNLIMITED,
    WINDOW_MS,
    QuotaExceeded,
    QuotaStore,
    QuotaStoreUnavailable,
    Reservation,
    ScopeLimits,
    ratelimit_headers,
    reservation_tokens,
)
from policies.quota_memory import MemoryQuotaStore
from policies.quota_redis import RedisQuotaStore

__all__ = ["Principal", "Protection", "Ticket", "CANCEL_PHASES"]

log = logging.getLogger("switchyard.protection")

CANCEL_PHASES = ("queued", "upstream_headers", "retry_backoff", "mid_stream", "non_streaming")
# Completion budget reserved when a request sends no max_tokens and its tenant
# sets no max_tokens_cap; reconciled with the real usage at the end anyway.
DEFAULT_COMPLETION_RESERVATION = 1024
# After Redis fails, go straight to the fail policy for this long instead of
# paying a connection timeout on every request.
REDIS_RETRY_S = 1.0

ClientGone = Callable[[], Awaitable[bool]]


def _limit(value: int | None) -> int:
    return UNLIMITED if value is None else value


class _Metrics:
    def __init__(self, registry: CollectorRegistry, protection: Protection) -> None:
        r = registry
        self.decisions = Counter(
            "switchyard_quota_decisions_total",
            "Quota decisions: admitted, or the limit that refused.",
            ["result"],
            registry=r,
        )
        self.store_unavailable = Counter(
            "switchyard_quota_store_unavailable_total",
            "Quota checks that found the shared store unreachable, by the policy applied.",
            ["policy"],
            registry=r,
        )
        self.check_seconds = Histogram(
            "switchyard_quota_check_seconds",
            "Time spent in one quota reservation.",
            ["store"],
            registry=r,
            buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5),
        )
        self.queue_rejected = Counter(
            "switchyard_admission_rejected_total",
            "Requests the admission queue turned away.",
            ["model", "reason"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "switchyard_admission_wait_seconds", "Time spent waiting in the queue.", ["model"], registry=r
        )
        self.leaked = Counter(
            "switchyard_protection_leaked_tickets_total",
            "Tickets collected without release (a bug; their resources were freed then).",
            registry=r,
        )
        self.cancelled = Counter(
            "switchyard_protection_cancelled_total",
            "Tickets released because the client went away, by phase "
            "(each one had its lease, reservation and queue slot freed).",
            ["phase"],
            registry=r,
        )
        registry.register(_StateCollector(protection))


class _StateCollector:
    """Live state read at scrape time: what must return to zero when idle."""

    def __init__(self, protection: Protection) -> None:
        self.protection = protection

    def collect(self):
        p = self.protection
        depth = GaugeMetricFamily("switchyard_admission_queue_depth", "Requests waiting per model.", labels=["model"])
        inflight = GaugeMetricFamily(
            "switchyard_admission_inflight", "Dispatched, unreleased requests per model.", labels=["model"]
        )
        for model in p.queue.models():
            depth.add_metric([model], p.queue.waiting(model))
            inflight.add_metric([model], p.queue.in_flight(model))
        yield depth
        yield inflight
        live = GaugeMetricFamily("switchyard_live_tickets", "Admitted requests not yet released.")
        live.add_metric([], len(p._live))
        yield live

    def describe(self):
        return []


class Ticket:
    """What one admitted request holds. `release` is idempotent."""

    def __init__(
        self,
        protection: Protection,
        principal: Principal,
        model: str,
        reservation: Reservation | None,
        slot: Slot | None,
        prompt_estimate: int,
    ) -> None:
        self._protection = protection
        self.principal = principal
        self.model = model
        self.reservation = reservation
        self.slot = slot
        self.prompt_estimate = prompt_estimate
        self.headers: dict[str, str] = ratelimit_headers(reservation.states) if reservation else {}
        self.released = False
        self.charged_tokens: int | None = None
        # A safety net, not the protocol: a ticket dropped without release (a
        # handler bug) still frees its queue slot and reservation when collected,
        # instead of shrinking capacity and holding a lease forever.
        self._finalizer = weakref.finalize(self, _release_leaked, protection, slot, reservation)

    @property
    def queue_wait_s(self) -> float:
        return self.slot.waited_s if self.slot else 0.0

    def tokens_to_charge(self, usage: Usage | None, phase: str | None) -> int:
        if usage is not None:
            return usage.total_tokens
        if self.reservation is None:
            return 0
        if phase is None:
            # Finished but nobody counted: keep the reservation rather than undercharge.
            return self.reservation.tokens
        if phase == "queued":
            return 0
        # Cancelled after dispatch with no count: the runtime may have read the prompt.
        return min(self.prompt_estimate, self.reservation.tokens)

    async def release(self, usage: Usage | None, phase: str | None = None) -> None:
        if self.released:
            return
        self.released = True
        self._finalizer.detach()
        p = self._protection
        # Local bookkeeping first and without awaiting: even if this task is
        # cancelled during the store call below, the slot and counters are free.
        p._live.discard(self)
        if self.slot is not None:
            p.queue.release(self.slot)
        if phase is not None:
            p.metrics.cancelled.labels(phase if phase in CANCEL_PHASES else "other").inc()
        self.charged_tokens = self.tokens_to_charge(usage, phase)
        if self.reservation is not None:
            await p._store_release(self.reservation, self.charged_tokens)


class Protection:
    def __init__(
        self,
        config: GatewayConfig,
        registry: CollectorRegistry,
        *,
        store: QuotaStore | None = None,
        window_ms: int = WINDOW_MS,
        bucket_ms: int = BUCKET_MS,
    ) -> None:
        self.config = config
        tenants = {name: TenantRecord(models=list(t.models), tier=t.tier) for name, t in config.tenants.items()}
        self.auth = Authenticator(config.auth, tenants)
        store_cfg = config.quota_store
        self.lease_ttl_ms = int(store_cfg.lease_ttl_s * 1000)
        self.on_unavailable = store_cfg.on_unavailable
        # The local store is the whole truth for kind=memory, and the fallback
        # (per-replica limits) for kind=redis with fail_open.
        self.local = MemoryQuotaStore(window_ms=window_ms, bucket_ms=bucket_ms)
        if store is not None:
            self.store: QuotaStore = store
        elif store_cfg.kind == "redis":
            self.store = RedisQuotaStore(
                store_cfg.url, key_prefix=store_cfg.key_prefix, window_ms=window_ms, bucket_ms=bucket_ms
            )
        else:
            self.store = self.local
        adm = config.admission
        self.queue = AdmissionQueue(
            max_queue=adm.max_queue, max_wait_s=adm.max_queue_wait_s, full_status=adm.full_status
        )
        self._live: weakref.WeakSet[Ticket] = weakref.WeakSet()
        # Reservations of requests still in the queue, by lease id: their leases
        # need the heartbeat too, or a wait longer than the TTL would free a
        # concurrency slot the request still holds.
        self._queued: dict[str, Reservation] = {}
        self._redis_down_until = 0.0
        self._heartbeat_task: asyncio.Task[None] | None = None
        self.metrics = _Metrics(registry, self)

    @classmethod
    def from_config(cls, config: GatewayConfig, registry: CollectorRegistry) -> Protection:
        _refuse_open_auth_on_public_address(config)
        return cls(config, registry)

    # ---- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        await self.auth.start()
        if isinstance(self.store, RedisQuotaStore):
            try:
                await self.store.ping()
            except QuotaStoreUnavailable as exc:
                log.error(
                    "quota store %s unreachable at start (%s); applying %s until it is back",
                    self.config.quota_store.url,
                    exc,
                    self.on_unavailable,
                )
        self._heartbeat_task = asyncio.create_task(self._heartbeat_loop(), name="lease-heartbeat")

    async def aclose(self) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            try:
                await self._heartbeat_task
            except asyncio.CancelledError:
                pass
        # A graceful stop gives its leases back now rather than after the TTL.
        for ticket in list(self._live):
            await ticket.release(None, None)
        await self.store.aclose()

    def set_capacity_provider(self, capacity: CapacityFn) -> None:
        self.queue.set_capacity_provider(capacity)

    # ---- the request path ----------------------------------------------------------

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        return await self.auth.authenticate(headers)

    def may_use(self, principal: Principal, model: str) -> bool:
        return self.auth.may_use(principal, model)

    def scopes_for(self, principal: Principal) -> tuple[ScopeLimits, ...]:
        scopes: list[ScopeLimits] = []
        tenant = self.config.tenants.get(principal.tenant)
        if tenant is not None and _has_limits(
            tenant.requests_per_minute, tenant.tokens_per_minute, tenant.max_concurrent
        ):
            scopes.append(
                ScopeLimits(
                    "t",
                    _limit(tenant.requests_per_minute),
                    _limit(tenant.tokens_per_minute),
                    _limit(tenant.max_concurrent),
                )
            )
        if principal.key_id is not None and _has_limits(
            principal.key_requests_per_minute, principal.key_tokens_per_minute, principal.key_max_concurrent
        ):
            scopes.append(
                ScopeLimits(
                    f"k:{principal.key_id}",
                    _limit(principal.key_requests_per_minute),
                    _limit(principal.key_tokens_per_minute),
                    _limit(principal.key_max_concurrent),
                )
            )
        return tuple(scopes)

    async def admit(
        self,
        principal: Principal,
        model: str,
        request: GenerationRequest,
        prompt_tokens_estimate: int,
        client_gone: ClientGone,
        *,
        choices: int | None = None,
    ) -> Ticket:
        """`choices`: completions the request will produce in all (a legacy
        completion with k prompts and n each makes k * n); default request.sampling.n."""
        if not self.may_use(principal, model):
            raise GatewayError(
                403, f"Your key may not use the model `{model}`.", param="model", code="model_not_allowed"
            )
        tenant_cfg: TenantConfig | None = self.config.tenants.get(principal.tenant)
        cap = tenant_cfg.max_tokens_cap if tenant_cfg and tenant_cfg.max_tokens_cap else DEFAULT_COMPLETION_RESERVATION
        tokens = reservation_tokens(
            prompt_tokens_estimate,
            request.sampling.max_tokens,
            choices if choices is not None else request.sampling.n,
            cap,
        )
        scopes = self.scopes_for(principal)
        reservation = await self._reserve(principal, scopes, tokens) if scopes else None
        if reservation is not None:
            self._queued[reservation.lease_id] = reservation
        try:
            slot = await self.queue.enter(
                model, principal.tenant, principal.tier, deadline=request.deadline, client_gone=client_gone
            )
        except ClientGoneWhileQueued:
            await self._unwind(reservation, "queued")
            raise GatewayError(
                499, "The client closed the request while it was queued.", code="client_closed"
            ) from None
        except asyncio.CancelledError:
            await self._unwind(reservation, "queued")
            raise
        except GatewayError as err:
            self.metrics.queue_rejected.labels(model, err.code or str(err.status)).inc()
            if reservation is not None:
                # Turned away before any work: neither the request nor its tokens count.
                await self._store_release(reservation, 0, refund_request=True)
                err.headers.update(ratelimit_headers(reservation.states))
            raise
        finally:
            if reservation is not None:
                self._queued.pop(reservation.lease_id, None)
        self.metrics.queue_wait.labels(model).observe(slot.waited_s)
        ticket = Ticket(self, principal, model, reservation, slot, prompt_tokens_estimate)
        self._live.add(ticket)
        return ticket

    async def _unwind(self, reservation: Reservation | None, phase: str) -> None:
        self.metrics.cancelled.labels(phase).inc()
        if reservation is not None:
            await self._store_release(reservation, 0)

    async def _reserve(self, principal: Principal, scopes: tuple[ScopeLimits, ...], tokens: int) -> Reservation:
        lease_id = uuid.uuid4().hex
        start = time.perf_counter()
        store = self.store
        try:
            try:
                if store is not self.local and time.monotonic() < self._redis_down_until:
                    raise QuotaStoreUnavailable("marked down")
                reservation = await store.reserve(principal.tenant, scopes, tokens, lease_id, self.lease_ttl_ms)
            except QuotaStoreUnavailable as exc:
                if store is not self.local:
                    if self._redis_down_until <= time.monotonic():
                        log.error("quota store unreachable (%s); applying %s", exc, self.on_unavailable)
                    self._redis_down_until = time.monotonic() + REDIS_RETRY_S
                self.metrics.store_unavailable.labels(self.on_unavailable).inc()
                if self.on_unavailable == "fail_closed":
                    self.metrics.decisions.labels("store_unavailable").inc()
                    raise GatewayError(
                        503,
                        "The quota store is unavailable; the request was not admitted.",
                        code="quota_store_unavailable",
                        retry_after=REDIS_RETRY_S,
                    ) from None
                store = self.local
                reservation = await store.reserve(principal.tenant, scopes, tokens, lease_id, self.lease_ttl_ms)
                reservation.store = "local-fallback"
        except QuotaExceeded as exc:
            self.metrics.decisions.labels(exc.limit).inc()
            raise _too_many(principal, exc) from None
        finally:
            self.metrics.check_seconds.labels(store.kind).observe(time.perf_counter() - start)
        self.metrics.decisions.labels("admitted").inc()
        return reservation

    async def _store_release(self, reservation: Reservation, used_tokens: int, refund_request: bool = False) -> None:
        store = self.store if reservation.store == self.store.kind else self.local
        try:
            await store.release(reservation, used_tokens, refund_request)
        except QuotaStoreUnavailable as exc:
            # The lease expires by its TTL (no heartbeat refreshes it any more);
            # the unreconciled tokens stay charged, the safe side.
            self.metrics.store_unavailable.labels("release").inc()
            log.warning("quota release for %s failed (%s); its lease will expire", reservation.tenant, exc)

    async def _heartbeat_loop(self) -> None:
        interval = max(0.05, self.lease_ttl_ms / 3000)
        while True:
            await asyncio.sleep(interval)
            by_store: dict[str, list[Reservation]] = {}
            held = [t.reservation for t in list(self._live) if t.reservation is not None]
            for reservation in held + list(self._queued.values()):
                by_store.setdefault(reservation.store, []).append(reservation)
            for kind, reservations in by_store.items():
                store = self.store if kind == self.store.kind else self.local
                try:
                    await store.heartbeat(reservations, self.lease_ttl_ms)
                except QuotaStoreUnavailable:
                    self.metrics.store_unavailable.labels("heartbeat").inc()
                except Exception:  # the loop must outlive any one failure
                    log.exception("lease heartbeat failed")

    # ---- introspection for tests and /metrics -------------------------------------------

    def snapshot(self) -> dict[str, int]:
        models = self.queue.models()
        return {
            "live_tickets": len(self._live),
            "queued": sum(self.queue.waiting(m) for m in models),
            "in_flight": sum(self.queue.in_flight(m) for m in models),
        }


def _release_leaked(protection: Protection, slot: Slot | None, reservation: Reservation | None) -> None:
    log.error("a ticket was dropped without release; freeing its slot and reservation now")
    protection.metrics.leaked.inc()
    if slot is not None:
        protection.queue.release(slot)
    if reservation is not None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop left (shutdown): the lease expires by its TTL
        loop.create_task(protection._store_release(reservation, reservation.tokens))


def _has_limits(*limits: int | None) -> bool:
    return any(v is not None for v in limits)


def _too_many(principal: Principal, exc: QuotaExceeded) -> GatewayError:
    who = f"tenant {principal.tenant}" if exc.scope == "t" else f"key {exc.scope.removeprefix('k:')}"
    headers = ratelimit_headers(exc.states)
    if exc.limit == "concurrency":
        return GatewayError(
            429,
            f"Too many concurrent requests for {who}: limit {exc.limit_value}. "
            "Retry when one of your requests finishes.",
            code="concurrency_limit_exceeded",
            retry_after=exc.retry_after_s,
            headers=headers,
        )
    unit = "requests per minute (RPM)" if exc.limit == "requests" else "tokens per minute (TPM)"
    if exc.retry_after_s is None:
        return GatewayError(
            429,
            f"Request too large for {who} on {unit}: limit {exc.limit_value}, requested "
            f"{exc.requested}. Reduce the prompt or max_tokens.",
            code="rate_limit_exceeded",
            headers=headers,
        )
    return GatewayError(
        429,
        f"Rate limit reached for {who} on {unit}: limit {exc.limit_value}, requested "
        f"{exc.requested}. Please try again in {exc.retry_after_s:.3g}s.",
        code="rate_limit_exceeded",
        retry_after=exc.retry_after_s,
        headers=headers,
    )


def _refuse_open_auth_on_public_address(config: GatewayConfig) -> None:
    """Auth may be off only when the config says so, or on a loopback address."""
    if config.auth.mode != "none" or "mode" in config.auth.model_fields_set:
        return
    host = config.listen.host
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"listen.host is {host!r} but auth is not configured: set auth.mode "
            "(keys, jwt, keys+jwt), or `auth: {mode: none}` to serve without auth on purpose."
        )
