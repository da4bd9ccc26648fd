"""Quota reservations and their leases in the quota store, and what happens when
the store is out of reach: a reservation charges the estimated tokens and takes the
leases in one atomic step (policies/quota.py), a heartbeat refreshes held leases (a
dead replica's expire within `lease_ttl_s`), and any store error marks the store down
(policies/quota_health.py) so the fail policy applies until a probe finds it again.
Releases that cannot be sent wait in a bounded list and go as replays when it
answers, so nothing is charged twice or longer than the outage. docs/architecture.md
("Tenancy") and docs/operations.md ("Every Redis error takes the same path") state
the rules.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from adapters.errors import GatewayError
from gateway.config.schema import GatewayConfig
from gateway.protection.metrics import ProtectionMetrics
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
    TokenBudget,
    ratelimit_headers,
)
from policies.quota_health import StoreHealth, StoreTransition, stop_task
from stores.quota_memory import MemoryQuotaStore
from stores.quota_redis import RedisQuotaStore

log = logging.getLogger("switchyard.protection")

# Releases kept for a store that is down; beyond this the oldest are dropped and
# their leases expire by their TTL (a long outage at a high request rate).
MAX_PENDING_RELEASES = 10_000


@dataclass(frozen=True, slots=True)
class PendingRelease:
    """A release the store has not taken yet."""

    reservation: Reservation
    used_tokens: int
    refund_request: bool = False


class QuotaLeases:
    def __init__(
        self,
        config: GatewayConfig,
        metrics: ProtectionMetrics,
        *,
        store: QuotaStore | None = None,
        local_store: MemoryQuotaStore | None = None,
        window_ms: int = WINDOW_MS,
        bucket_ms: int = BUCKET_MS,
    ) -> None:
        self.config = config
        self.metrics = metrics
        store_cfg = config.quota_store
        self.lease_ttl_ms = int(store_cfg.lease_ttl_s * 1000)
        self.on_unavailable = store_cfg.on_unavailable
        # The local store is the whole truth for kind=memory, and the fallback
        # (per-replica limits) for kind=redis with fail_open. A worker of several
        # brings its own, which enforces its share (gateway/protection/worker_quota.py).
        self.local = local_store or MemoryQuotaStore(window_ms=window_ms, bucket_ms=bucket_ms)
        self.where = store_cfg.redis_target().describe() if store_cfg.kind == "redis" else "memory"
        # Set when Sentinel names a new master: the heartbeat puts the leases back now.
        self._master_changed = asyncio.Event()
        if store is not None:
            self.store: QuotaStore = store
        elif store_cfg.kind == "redis":
            self.store = RedisQuotaStore(
                store_cfg.redis_target(),
                key_prefix=store_cfg.key_prefix,
                window_ms=window_ms,
                bucket_ms=bucket_ms,
                timeout_s=store_cfg.timeout_s,
                on_master_change=self._master_changed.set,
            )
        else:
            self.store = self.local
        self.health = StoreHealth(self._probe, self._on_transition)
        metrics.store_up.set(1)
        # Reservations of requests still in the admission queue, by lease id: their
        # leases need the heartbeat too, or a wait longer than the TTL would free a
        # concurrency slot the request still holds.
        self.queued: dict[str, Reservation] = {}
        self.pending: deque[PendingRelease] = deque(maxlen=MAX_PENDING_RELEASES)
        self._held: Callable[[], Iterable[Reservation]] = tuple
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._replay_task: asyncio.Task[None] | None = None

    @property
    def shared(self) -> bool:
        """The store is another process (Redis), which can be out of reach."""
        return self.store is not self.local

    async def start(self, held: Callable[[], Iterable[Reservation]]) -> None:
        """Check the store and start the heartbeat for `held()` and the queued reservations."""
        self._held = held
        if self.shared:
            try:
                await self.store.ping()
            except QuotaStoreUnavailable as exc:
                self.health.mark_down(f"unreachable at start: {exc}")
        self._heartbeat_task = asyncio.create_task(self._heartbeat_loop(), name="lease-heartbeat")

    async def stop_heartbeat(self) -> None:
        for task in (self._heartbeat_task, self._replay_task):
            if task is not None:
                await stop_task(task)

    async def aclose(self) -> None:
        await self.stop_heartbeat()
        await self.health.aclose()
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
        self, principal: Principal, scopes: tuple[ScopeLimits, ...], budget: TokenBudget, units: int = 1
    ) -> Reservation:
        """`units`: the concurrency leases to take, one per generation the request starts."""
        lease_id = uuid.uuid4().hex
        tokens = budget.total
        m = self.metrics
        start = time.perf_counter()
        store = self.store
        try:
            if self.shared and not self.health.up:
                store = self.local
                reservation = await self._store_unavailable(principal, scopes, tokens, lease_id, units)
            else:
                try:
                    reservation = await self.store.reserve(
                        principal.tenant, scopes, tokens, lease_id, self.lease_ttl_ms, units
                    )
                except QuotaStoreUnavailable as exc:
                    # No answer is not "not charged": a hung Redis runs the script when
                    # it wakes up. Its lease is dropped once the store answers again.
                    orphan = Reservation(
                        principal.tenant, scopes, lease_id, bucket=-1, tokens=0, store=self.store.kind, units=units
                    )
                    self.pending.append(PendingRelease(orphan, 0))
                    self.health.mark_down(str(exc) or type(exc).__name__)
                    store = self.local
                    reservation = await self._store_unavailable(principal, scopes, tokens, lease_id, units)
        except QuotaExceeded as exc:
            m.decisions.labels(exc.limit).inc()
            raise _refusal(principal, exc, budget) from None
        finally:
            m.check_seconds.labels(store.kind).observe(time.perf_counter() - start)
        m.decisions.labels("admitted").inc()
        return reservation

    async def _store_unavailable(
        self, principal: Principal, scopes: tuple[ScopeLimits, ...], tokens: int, lease_id: str, units: int
    ) -> Reservation:
        """The fail policy: 503, or the same limits per replica."""
        self.metrics.store_unavailable.labels(self.on_unavailable).inc()
        if self.on_unavailable == "fail_closed":
            self.metrics.decisions.labels("store_unavailable").inc()
            raise GatewayError(
                503,
                "The quota store is unavailable; the request was not admitted. Retry shortly.",
                code="quota_store_unavailable",
                retry_after=self.health.max_delay_s,
            )
        reservation = await self.local.reserve(principal.tenant, scopes, tokens, lease_id, self.lease_ttl_ms, units)
        reservation.store = "local-fallback"
        return reservation

    async def release(self, reservation: Reservation, used_tokens: int, refund_request: bool = False) -> None:
        if reservation.store != self.store.kind or not self.shared:
            await self.local.release(reservation, used_tokens, refund_request)
            return
        if not self.health.up:
            self.pending.append(PendingRelease(reservation, used_tokens, refund_request))
            return
        try:
            await self.store.release(reservation, used_tokens, refund_request)
        except QuotaStoreUnavailable as exc:
            self.metrics.store_unavailable.labels("release").inc()
            self.pending.append(PendingRelease(reservation, used_tokens, refund_request))
            self.health.mark_down(str(exc) or type(exc).__name__)

    async def _probe(self) -> None:
        # Pooled connections may be dead (a restarted Redis, a failed-over master):
        # ask on a fresh one, of whoever is master now.
        await self.store.reset_connections()
        await self.store.ping()
        # Before shared limits apply again: a failover may have lost leases this
        # replica still holds, and without them the new master would admit too many.
        await self.reassert_leases()

    def _on_transition(self, change: StoreTransition) -> None:
        self.metrics.store_up.set(1 if change.up else 0)
        self.metrics.store_transitions.labels("up" if change.up else "down").inc()
        where = self.where
        if change.up:
            log.warning(
                "quota store %s answers again after %.1f s; shared limits apply again", where, change.down_for_s
            )
            self._replay_task = asyncio.get_running_loop().create_task(self._send_pending(), name="quota-replay")
        else:
            log.error(
                "quota store %s unreachable (%s); applying %s until it answers",
                where,
                change.reason,
                self.on_unavailable,
            )

    async def _send_pending(self) -> None:
        """Releases kept while the store was down, oldest first."""
        while self.pending and self.health.up:
            item = self.pending.popleft()
            try:
                await self.store.release(item.reservation, item.used_tokens, item.refund_request, replay=True)
            except QuotaStoreUnavailable as exc:
                self.pending.appendleft(item)
                self.health.mark_down(str(exc) or type(exc).__name__)
                return

    def _holding(self) -> list[Reservation]:
        """Every reservation whose leases this replica holds: running and queued."""
        return [*self._held(), *self.queued.values()]

    async def reassert_leases(self) -> None:
        """Refresh the shared store's leases of what this replica holds, re-creating
        any it lost. A release sent while the refresh was on its way may have run
        first, and the refresh then re-created a lease just dropped: drop those again
        (the same release with the tokens left as they are: the leases only)."""
        sent = [r for r in self._holding() if r.store == self.store.kind]
        if not sent:
            return
        await self.store.heartbeat(sent, self.lease_ttl_ms)
        still = {r.lease_id for r in self._holding()}
        for r in sent:
            if r.lease_id not in still:
                await self.store.release(r, r.tokens)

    async def _heartbeat_loop(self) -> None:
        interval = max(0.05, self.lease_ttl_ms / 3000)
        while True:
            try:
                # not asyncio.wait_for: on 3.11 it drops a cancel that lands as the event is set
                # (a new master as the heartbeat stops), and the loop would run on
                async with asyncio.timeout(interval):
                    await self._master_changed.wait()
            except TimeoutError:
                pass
            self._master_changed.clear()
            if self.shared and self.health.up:
                try:
                    await self.reassert_leases()
                except QuotaStoreUnavailable as exc:
                    self.metrics.store_unavailable.labels("heartbeat").inc()
                    self.health.mark_down(str(exc) or type(exc).__name__)
                except Exception:  # the loop must outlive any one failure
                    log.exception("lease heartbeat failed")
            # Nothing is awaited between reading the list and refreshing it here.
            local = [r for r in self._holding() if r.store != self.store.kind or not self.shared]
            if local:
                await self.local.heartbeat(local, self.lease_ttl_ms)
            if self.pending and self.health.up:
                await self._send_pending()


def _limit(value: int | None) -> int:
    return UNLIMITED if value is None else value


def _has_limits(*limits: int | None) -> bool:
    return any(v is not None for v in limits)


def _refusal(principal: Principal, exc: QuotaExceeded, budget: TokenBudget) -> GatewayError:
    """A refusal a client can act on. Waiting helps: 429 with Retry-After from the
    limiter. Waiting cannot help (the request alone exceeds a limit, or the limit
    is 0): a status no client retries, saying what to change."""
    who = f"tenant {principal.tenant}" if exc.scope == "t" else f"key {exc.scope.removeprefix('k:')}"
    headers = ratelimit_headers(exc.states)
    setting = {"requests": "requests_per_minute", "tokens": "tokens_per_minute", "concurrency": "max_concurrent"}[
        exc.limit
    ]
    if exc.limit == "concurrency" and exc.requested > exc.limit_value > 0:
        # 400 for the same reason as _cannot_fit: no wait makes it fit.
        return GatewayError(
            400,
            f"This request starts {exc.requested} generations at once (its prompts x n), more than the "
            f"{exc.limit_value} concurrent ones {who} may run. Reduce n or the number of prompts.",
            code="request_exceeds_concurrency_limit",
            param="n",
            headers=headers,
        )
    if exc.retry_after_s is None and exc.limit == "tokens" and exc.limit_value > 0:
        return _cannot_fit(who, exc.limit_value, budget, headers)
    if exc.retry_after_s is None:
        return GatewayError(
            403,
            f"The {setting} limit of {who} is 0: it may send no requests. Ask the gateway operator to raise it.",
            code="quota_zero",
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
    return GatewayError(
        429,
        f"Rate limit reached for {who} on {unit}: limit {exc.limit_value}, requested "
        f"{exc.requested}. Please try again in {exc.retry_after_s:.3g}s.",
        code="rate_limit_exceeded",
        retry_after=exc.retry_after_s,
        headers=headers,
    )


def _cannot_fit(who: str, limit: int, budget: TokenBudget, headers: dict[str, str]) -> GatewayError:
    """400, not 429: the request is larger than the whole per-minute limit, so no
    wait makes it fit, and every 429 invites a retry (the OpenAI SDKs retry each
    one, and this gateway's 429s carry Retry-After). Like a prompt over the
    context length, it must be changed before it is sent again."""
    completion = "max_tokens" if not budget.from_cap else "the default completion budget (no max_tokens sent)"
    size = (
        f"this request reserves {budget.total} tokens: a prompt of about {budget.prompt} plus "
        f"{budget.choices} x {budget.per_choice} for {completion}"
    )
    room = (limit - budget.prompt) // budget.choices
    if room < 1:
        fix = "Shorten the prompt"
    elif budget.choices > 1:
        fix = f"Set max_tokens to at most {room}, lower n, or shorten the prompt"
    else:
        fix = f"Set max_tokens to at most {room}, or shorten the prompt"
    return GatewayError(
        400,
        f"Request too large for {who}: its tokens-per-minute (TPM) limit is {limit} and {size}, so it can never "
        f"be admitted. {fix}, or ask for a higher tokens_per_minute.",
        code="request_exceeds_tpm_limit",
        param="max_tokens" if room >= 1 else None,
        headers=headers,
    )
