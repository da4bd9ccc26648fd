"""Quota reservations and their leases in the quota store, and what happens when
the store is out of reach.

A reservation charges a request's estimated tokens and takes its concurrency
leases in one atomic step (policies/quota.py); `release` reconciles it with the
real usage. Leases are refreshed by a heartbeat while they are held, so a replica
that dies stops refreshing and its leases expire within `quota_store.lease_ttl_s`
instead of leaking. Redis unreachable: `fail_open` falls back to per-replica limits
in memory, `fail_closed` refuses with 503; both are counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable

from adapters.errors import GatewayError
from gateway.config import GatewayConfig
from gateway.protection_metrics import ProtectionMetrics
from policies.auth import Principal
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
)
from policies.quota_memory import MemoryQuotaStore
from policies.quota_redis import RedisQuotaStore

log = logging.getLogger("switchyard.protection")

# After Redis fails, go straight to the fail policy for this long instead of
# paying a connection timeout on every request.
REDIS_RETRY_S = 1.0


class QuotaLeases:
    def __init__(
        self,
        config: GatewayConfig,
        metrics: ProtectionMetrics,
        *,
        store: QuotaStore | None = None,
        window_ms: int = WINDOW_MS,
        bucket_ms: int = BUCKET_MS,
    ) -> None:
        self.config = config
        self.metrics = metrics
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
        # Reservations of requests still in the admission queue, by lease id: their
        # leases need the heartbeat too, or a wait longer than the TTL would free a
        # concurrency slot the request still holds.
        self.queued: dict[str, Reservation] = {}
        self._redis_down_until = 0.0
        self._heartbeat_task: asyncio.Task[None] | None = None

    async def start(self, held: Callable[[], Iterable[Reservation]]) -> None:
        """Check the store and start the heartbeat for `held()` and the queued reservations."""
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
        self._heartbeat_task = asyncio.create_task(self._heartbeat_loop(held), name="lease-heartbeat")

    async def stop_heartbeat(self) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            try:
                await self._heartbeat_task
            except asyncio.CancelledError:
                pass

    async def aclose(self) -> None:
        await self.stop_heartbeat()
        await self.store.aclose()

    def scopes_for(self, principal: Principal) -> tuple[ScopeLimits, ...]:
        """The limits that apply to `principal`: its tenant's, then its key's."""
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

    async def reserve(
        self, principal: Principal, scopes: tuple[ScopeLimits, ...], tokens: int, units: int = 1
    ) -> Reservation:
        """`units`: the concurrency leases to take, one per generation the request starts."""
        lease_id = uuid.uuid4().hex
        start = time.perf_counter()
        store = self.store
        try:
            try:
                if store is not self.local and time.monotonic() < self._redis_down_until:
                    raise QuotaStoreUnavailable("marked down")
                reservation = await store.reserve(principal.tenant, scopes, tokens, lease_id, self.lease_ttl_ms, units)
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
                reservation = await store.reserve(principal.tenant, scopes, tokens, lease_id, self.lease_ttl_ms, units)
                reservation.store = "local-fallback"
        except QuotaExceeded as exc:
            self.metrics.decisions.labels(exc.limit).inc()
            raise _too_many(principal, exc) from None
        finally:
            self.metrics.check_seconds.labels(store.kind).observe(time.perf_counter() - start)
        self.metrics.decisions.labels("admitted").inc()
        return reservation

    async def release(self, reservation: Reservation, used_tokens: int, refund_request: bool = False) -> None:
        store = self.store if reservation.store == self.store.kind else self.local
        try:
            await store.release(reservation, used_tokens, refund_request)
        except QuotaStoreUnavailable as exc:
            # The lease expires by its TTL (no heartbeat refreshes it any more);
            # the unreconciled tokens stay charged, the safe side.
            self.metrics.store_unavailable.labels("release").inc()
            log.warning("quota release for %s failed (%s); its lease will expire", reservation.tenant, exc)

    async def _heartbeat_loop(self, held: Callable[[], Iterable[Reservation]]) -> None:
        interval = max(0.05, self.lease_ttl_ms / 3000)
        while True:
            await asyncio.sleep(interval)
            by_store: dict[str, list[Reservation]] = {}
            for reservation in [*held(), *self.queued.values()]:
                by_store.setdefault(reservation.store, []).append(reservation)
            for kind, reservations in by_store.items():
                store = self.store if kind == self.store.kind else self.local
                try:
                    await store.heartbeat(reservations, self.lease_ttl_ms)
                except QuotaStoreUnavailable:
                    self.metrics.store_unavailable.labels("heartbeat").inc()
                except Exception:  # the loop must outlive any one failure
                    log.exception("lease heartbeat failed")


def _limit(value: int | None) -> int:
    return UNLIMITED if value is None else value


def _has_limits(*limits: int | None) -> bool:
    return any(v is not None for v in limits)


def _too_many(principal: Principal, exc: QuotaExceeded) -> GatewayError:
    who = f"tenant {principal.tenant}" if exc.scope == "t" else f"key {exc.scope.removeprefix('k:')}"
    headers = ratelimit_headers(exc.states)
    if exc.limit == "concurrency" and exc.requested > exc.limit_value > 0:
        return GatewayError(
            429,
            f"This request starts {exc.requested} generations at once (its prompts x n), more than the "
            f"{exc.limit_value} concurrent ones {who} may run. Reduce n or the number of prompts.",
            code="concurrency_limit_exceeded",
            param="n",
            headers=headers,
        )
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
