"""The glue the HTTP handlers call: authenticate, then admit (quota reservation
and concurrency lease in one atomic step, then the model's fair queue), and at
the end release the ticket with the real usage.

Always present: a config with `auth.mode: none` and no tenants gets a Protection
whose every principal is the anonymous tenant with no limits (no reservation is
made), and whose admission queue still waits for backend capacity.

Every resource a request holds (the lease, the reserved tokens, the queue slot)
belongs to its `Ticket`, and `Ticket.release` frees all of it, idempotently, in
every phase, cancelled or not. The store side (reservations, lease heartbeat,
Redis outages) is gateway/protection/quota_leases.py.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from adapters.base import GenerationRequest, Usage
from adapters.errors import GatewayError, client_closed
from gateway.config.exposure import open_auth_problem
from gateway.config.schema import ConfigError, GatewayConfig, TenantConfig
from gateway.observe.context import current_trace
from gateway.protection.metrics import ProtectionMetrics, StateCollector
from gateway.protection.quota_leases import QuotaLeases
from gateway.serving.phases import CancelPhase
from policies.admission import AdmissionQueue, CapacityFn, ClientGoneWhileQueued, Slot
from policies.auth import Authenticator, Principal, TenantRecord
from policies.quota import UNLIMITED, Reservation, TokenBudget, ratelimit_headers, refunded, token_budget
from stores.quota_memory import MemoryQuotaStore

__all__ = ["Principal", "Protection", "Ticket", "stored_read_usage"]

log = logging.getLogger("switchyard.protection")

# Completion budget reserved when a request sends no max_tokens and its tenant
# sets no max_tokens_cap; reconciled with the real usage at the end anyway.
DEFAULT_COMPLETION_RESERVATION = 1024

ClientGone = Callable[[], Awaitable[bool]]

# What a read of stored responses is ticketed under (no model: `admit_read`).
STORED_READS = "(stored responses)"
# The bytes of a stored-response read charged as one token: about a token's worth of
# English text, so a read costs what generating or sending that text would have.
STORED_BYTES_PER_TOKEN = 4


def stored_read_usage(sent_bytes: int) -> Usage:
    """What a read of stored responses that sent `sent_bytes` is charged."""
    return Usage(prompt_tokens=max(1, -(-sent_bytes // STORED_BYTES_PER_TOKEN)), completion_tokens=0)


@dataclass(eq=False)  # eq=False: tickets are told apart by identity
class Ticket:
    """What one admitted request holds. `release` is idempotent."""

    _protection: Protection = field(repr=False)
    model: str
    reservation: Reservation | None
    slot: Slot
    prompt_estimate: int
    headers: dict[str, str] = field(init=False)
    released: bool = field(default=False, init=False)
    charged_tokens: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.headers = ratelimit_headers(self.reservation.states) if self.reservation else {}

    def __del__(self) -> None:
        # A safety net, not the protocol: a ticket dropped without release (a handler
        # bug) still frees its queue slot and reservation when collected, instead of
        # shrinking capacity and holding a lease forever. (`__del__` rather than
        # `weakref.finalize`: nothing to build or detach per ticket.)
        if not self.released:
            self._protection._live.pop(id(self), None)
            _release_leaked(self._protection, self.slot, self.reservation)

    def tokens_to_charge(self, usage: Usage | None, phase: CancelPhase | None) -> int:
        if usage is not None:
            return usage.total_tokens
        if self.reservation is None:
            return 0
        if phase is None:
            # Finished but nobody counted: keep the reservation rather than undercharge.
            return self.reservation.tokens
        if phase == CancelPhase.QUEUED:
            return 0
        # Cancelled after dispatch with no count: the runtime may have read the prompt.
        return min(self.prompt_estimate, self.reservation.tokens)

    async def release(self, usage: Usage | None, phase: CancelPhase | None = None) -> None:
        """Free everything; `phase` is where the client went away (None: it did not)."""
        if self.released:
            return
        self.released = True
        p = self._protection
        # Local bookkeeping first and without awaiting: even if this task is
        # cancelled during the store call below, the slot and counters are free.
        p._live.pop(id(self), None)
        p.queue.release(self.slot)
        self.charged_tokens = self.tokens_to_charge(usage, phase)
        if self.reservation is not None:
            await p.leases.release(self.reservation, self.charged_tokens)


class Protection:
    def __init__(self, config: GatewayConfig, registry: CollectorRegistry, **quota_stores: Any) -> None:
        """`quota_stores` go to QuotaLeases as they are: its `store`, `local_store`,
        `window_ms` and `bucket_ms` (tests choose them; a gateway takes the config's)."""
        self.config = config
        self.auth = _authenticator(config)
        self.metrics = ProtectionMetrics(registry)
        self.leases = QuotaLeases(config, self.metrics, **quota_stores)
        adm = config.admission
        self.queue = AdmissionQueue(
            max_queue=adm.max_queue, max_wait_s=adm.max_queue_wait_s, full_status=adm.full_status
        )
        # The tickets not yet released, by id: weak references, so a leaked one is still
        # collected (`Ticket.__del__` takes it out); plain dict operations, no Python code.
        self._live: dict[int, weakref.ReferenceType[Ticket]] = {}
        registry.register(
            StateCollector(
                self.queue,
                lambda: len(self._live),
                lambda: len(self._held_reservations()) + len(self.leases.queued),
                lambda: len(self.leases.pending),
            )
        )

    @classmethod
    def from_config(
        cls, config: GatewayConfig, registry: CollectorRegistry, local_store: MemoryQuotaStore | None = None
    ) -> Protection:
        _refuse_open_auth_on_public_address(config)
        return cls(config, registry, local_store=local_store)

    async def reconfigure(self, config: GatewayConfig) -> None:
        """A reloaded config (gateway/lifecycle/reload.py): tenants, keys, limits and the queue's
        bounds change at once. The quota store with its counters, the leases held and
        the requests waiting stay (a reload that changes `quota_store` is refused)."""
        _refuse_open_auth_on_public_address(config)
        auth = _authenticator(config)
        await auth.start()
        auth.keys.reload_errors = self.auth.keys.reload_errors  # a counter: it carries on
        self.config = self.leases.config = config
        self.auth = auth
        adm = config.admission
        self.queue.max_queue, self.queue.max_wait_s = adm.max_queue, adm.max_queue_wait_s
        self.queue.full_status = adm.full_status

    # ---- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        await self.auth.start()
        await self.leases.start(self._held_reservations)

    def _held_reservations(self) -> list[Reservation]:
        return [t.reservation for t in self._live_tickets() if t.reservation is not None]

    def _live_tickets(self) -> list[Ticket]:
        return [t for ref in list(self._live.values()) if (t := ref()) is not None]

    async def aclose(self) -> None:
        await self.leases.stop_heartbeat()
        # A graceful stop gives its leases back now rather than after the TTL.
        for ticket in self._live_tickets():
            await ticket.release(None, None)
        await self.leases.aclose()

    def set_capacity_provider(self, capacity: CapacityFn) -> None:
        self.queue.set_capacity_provider(capacity)

    # ---- the request path ----------------------------------------------------------

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        with current_trace().step("switchyard.authenticate"):
            return await self.auth.authenticate(headers)

    def may_use(self, principal: Principal, model: str) -> bool:
        return self.auth.may_use(principal, model)

    async def admit(
        self,
        principal: Principal,
        model: str,
        request: GenerationRequest,
        prompt_tokens_estimate: int | Callable[[], int],
        client_gone: ClientGone,
        *,
        choices: int | None = None,
        size_units: int = 1,
    ) -> Ticket:
        """The quota reservation and the model's queue (the front door, gateway/intake.py,
        checked that `principal` may use `model`). `choices`: completions the request will produce in all
        (a legacy completion with k prompts and n each makes k * n); default
        request.sampling.n. Each is one upstream generation, so the request holds
        that many units of the tenant's concurrency and of the model's capacity. A
        request without max_tokens under a token limit gets the completion budget it
        reserved as its max_tokens. `size_units`: a call's size in the tenant's
        concurrency when it is more than its generations (a 2,048-input embeddings
        call is 32 units of 64 inputs), held up to the tenant's own limit, never refused
        for it (the model's queue still counts `choices`). `prompt_tokens_estimate` may be
        a function, called only when a limit needs the estimate (0 without one)."""
        units = max(1, choices if choices is not None else request.sampling.n)
        scopes = self.leases.scopes_for(principal)
        reservation = None
        estimate = prompt_tokens_estimate if isinstance(prompt_tokens_estimate, int) else 0
        if scopes:  # no limits, nothing to reserve (and no budget to size)
            if not isinstance(prompt_tokens_estimate, int):
                estimate = prompt_tokens_estimate()
            tenant_cfg: TenantConfig | None = self.config.tenants.get(principal.tenant)
            cap = (
                tenant_cfg.max_tokens_cap
                if tenant_cfg and tenant_cfg.max_tokens_cap
                else DEFAULT_COMPLETION_RESERVATION
            )
            budget = token_budget(estimate, request.sampling.max_tokens, units, cap)
            with current_trace().step("switchyard.quota"):
                leases = max(units, min([size_units] + [s.max_concurrent for s in scopes if s.max_concurrent > 0]))
                reservation = await self.leases.reserve(principal, scopes, budget, leases)
            if budget.from_cap and any(s.tokens_per_window != UNLIMITED for s in scopes):
                # Generate no more than was reserved: without max_tokens a runtime may
                # write up to its context length, and a few such requests would spend
                # many times the tenant's tokens per minute before reconciliation.
                request.sampling.max_tokens = budget.per_choice
        if reservation is not None:
            self.leases.queued[reservation.lease_id] = reservation
        try:
            with current_trace().step("switchyard.queue"):
                slot = await self.queue.enter(
                    model,
                    principal.tenant,
                    principal.tier,
                    deadline=request.deadline,
                    client_gone=client_gone,
                    units=units,
                )
        except ClientGoneWhileQueued:
            await self._unwind(reservation)
            raise client_closed(CancelPhase.QUEUED) from None
        except asyncio.CancelledError:
            await self._unwind(reservation)
            raise
        except GatewayError as err:
            m = self.metrics
            m.queue_rejected.labels(model, err.code or str(err.status)).inc()
            if reservation is not None:
                # Turned away before any work: neither the request nor its tokens count.
                await self.leases.release(reservation, 0, refund_request=True)
                err.headers.update(ratelimit_headers(refunded(reservation)))
            raise
        finally:
            if reservation is not None:
                self.leases.queued.pop(reservation.lease_id, None)
        m = self.metrics
        m.queue_wait.labels(model).observe(slot.waited_s)
        ticket = Ticket(self, model, reservation, slot, estimate)
        self._live[id(ticket)] = weakref.ref(ticket)
        return ticket

    async def admit_read(self, principal: Principal) -> Ticket:
        """A read of the tenant's stored responses (GET, input_items, DELETE) is a
        request like the others for its limits: one of its requests per minute, one
        unit of its concurrency while it runs, and its bytes as tokens
        (`stored_read_usage`, charged at release). It uses no model's capacity, so it
        waits in no queue; at least one token is reserved, so that a tenant past its
        tokens per minute is refused before the read."""
        scopes = self.leases.scopes_for(principal)
        reservation = None
        if scopes:
            with current_trace().step("switchyard.quota"):
                reservation = await self.leases.reserve(principal, scopes, TokenBudget(1, 0, 1, False), 1)
        slot = Slot(STORED_READS, 0.0, units=0, released=True)  # no queue place to give back
        ticket = Ticket(self, STORED_READS, reservation, slot, 1)
        self._live[id(ticket)] = weakref.ref(ticket)
        return ticket

    async def _unwind(self, reservation: Reservation | None) -> None:
        """The client left while queued."""
        if reservation is not None:
            await self.leases.release(reservation, 0)

    # ---- introspection for tests and /metrics -------------------------------------------

    def snapshot(self) -> dict[str, int]:
        models = self.queue.models()
        return {
            "live_tickets": len(self._live),
            "queued": sum(self.queue.waiting(m) for m in models),
            "in_flight": sum(self.queue.in_flight(m) for m in models),
        }


def _release_leaked(protection: Protection, slot: Slot, reservation: Reservation | None) -> None:
    log.error("a ticket was dropped without release; freeing its slot and reservation now")
    protection.metrics.leaked.inc()
    protection.queue.release(slot)
    if reservation is not None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop left (shutdown): the lease expires by its TTL
        loop.create_task(protection.leases.release(reservation, reservation.tokens))


def _authenticator(config: GatewayConfig) -> Authenticator:
    tenants = {name: TenantRecord(models=list(t.models), tier=t.tier) for name, t in config.tenants.items()}
    return Authenticator(config.auth, tenants)


def _refuse_open_auth_on_public_address(config: GatewayConfig) -> None:
    """The config's own rule (gateway/config/schema.py), again for a config changed since it was validated."""
    problem = open_auth_problem(config.auth, config.listen)
    if problem is not None:
        raise ConfigError(problem)
