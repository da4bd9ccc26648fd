"""Quota decisions shared by both stores: requests per minute, tokens per minute and
concurrent requests, per tenant and per API key, identical in `quota_memory` and
`quota_redis` (tested against both). Rates are a sliding window of buckets; tokens are
reserved at admission in the same atomic step as every check and reconciled at release,
an overrun carried into the next windows; concurrency is leases with an expiry, one per
generation; every check reads the store's clock. docs/architecture.md, "Tenancy", has
the semantics and why.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

WINDOW_MS = 60_000
BUCKET_MS = 1_000
UNLIMITED = -1
# At most this many windows ahead does a debt reach (its last part holds the rest).
MAX_CARRY_WINDOWS = 60


@dataclass(frozen=True, slots=True)
class ScopeLimits:
    """One scope whose limits a request must satisfy: the tenant, or one API key.

    `name` is unique within the tenant ("t" for the tenant itself, "k:<id>" for a
    key). A limit of `UNLIMITED` (-1) is not checked; 0 admits nothing.
    """

    name: str
    requests_per_window: int = UNLIMITED
    tokens_per_window: int = UNLIMITED
    max_concurrent: int = UNLIMITED


@dataclass(slots=True)
class ScopeState:
    """What one scope looks like after a decision: the source of x-ratelimit-*.

    The reset times are the limiter's own answer to "when could I send this
    again": the milliseconds until enough of the window frees for one more
    request (`requests_reset_ms`) and for as many tokens as this request took
    (`tokens_reset_ms`); 0 while it fits now (`reset_ms`)."""

    scope: str
    requests_limit: int
    requests_remaining: int
    requests_reset_ms: int
    tokens_limit: int
    tokens_remaining: int
    tokens_reset_ms: int
    concurrent: int


@dataclass(slots=True)
class Reservation:
    """What admission took; `release` gives back what was not used."""

    tenant: str
    scopes: tuple[ScopeLimits, ...]
    lease_id: str
    bucket: int  # index of the bucket the request and its tokens were counted in
    tokens: int
    states: list[ScopeState] = field(default_factory=list)
    store: str = ""  # which store holds it ("memory", "redis", "local-fallback")
    units: int = 1  # concurrency leases held: one per generation

    def lease_members(self) -> list[str]:
        return lease_members(self.lease_id, self.units)


def lease_members(lease_id: str, units: int) -> list[str]:
    """The lease-set members of one request holding `units` concurrency units."""
    return [lease_id] + [f"{lease_id}#{i}" for i in range(1, units)]


class QuotaExceeded(Exception):
    """A limit would be exceeded. `retry_after_s` is None when waiting cannot help
    (a single request larger than the whole token limit)."""

    def __init__(
        self,
        scope: str,
        limit: str,
        retry_after_s: float | None,
        states: list[ScopeState],
        requested: int = 1,
        limit_value: int = 0,
    ) -> None:
        super().__init__(f"{scope}: {limit} limit reached")
        self.scope = scope
        self.limit = limit  # "requests" | "tokens" | "concurrency"
        self.retry_after_s = retry_after_s
        self.states = states
        self.requested = requested
        self.limit_value = limit_value


class QuotaStoreUnavailable(Exception):
    """The shared store cannot be reached; the caller applies the fail policy."""


@dataclass(frozen=True, slots=True)
class QuotaAsk:
    """What one request asks of its tenant's quota, the one shape every store takes:
    one request, `tokens` reserved tokens and `units` concurrency leases (members of
    `lease_id`, expiring after `lease_ttl_ms` unless heartbeated), in every scope."""

    tenant: str
    scopes: tuple[ScopeLimits, ...]
    tokens: int
    lease_id: str
    lease_ttl_ms: int
    units: int = 1


class QuotaStore(ABC):
    """A quota store (`quota_memory`, `quota_redis`): the same semantics, tested
    against both."""

    kind: str

    async def reserve(
        self,
        tenant: str,
        scopes: tuple[ScopeLimits, ...],
        tokens: int,
        lease_id: str,
        lease_ttl_ms: int,
        units: int = 1,
    ) -> Reservation:
        """Check every limit of every scope and take the request, the tokens and
        `units` leases atomically; raise QuotaExceeded and take nothing if any would break."""
        return await self.take(QuotaAsk(tenant, scopes, tokens, lease_id, lease_ttl_ms, units))

    @abstractmethod
    async def take(self, ask: QuotaAsk) -> Reservation:
        """`reserve`, for one ask: what each store implements."""

    @abstractmethod
    async def release(
        self, reservation: Reservation, used_tokens: int, refund_request: bool = False, *, replay: bool = False
    ) -> None:
        """Reconcile tokens (reserved -> used), drop the lease; `refund_request`
        also uncounts the request (it was rejected after the quota step).
        `replay`: this release was sent before and its answer never came (the
        store may have run it): the tokens are reconciled only in a scope that
        still holds the lease, so a release runs once however often it is sent."""

    @abstractmethod
    async def heartbeat(self, reservations: list[Reservation], lease_ttl_ms: int) -> None:
        """Push the expiry of live leases forward."""

    @abstractmethod
    async def concurrent(self, tenant: str, scope: str) -> int:
        """Live (unexpired) leases of one scope: for tests and metrics."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise QuotaStoreUnavailable unless the store answers now."""

    @abstractmethod
    async def reset_connections(self) -> None:
        """Drop idle pooled connections, so the next call opens a fresh one
        (after a store restart every pooled connection is dead)."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close connections; the store is not used again."""


def time_until_fits(
    buckets: list[tuple[int, int]], used: int, need: int, limit: int, now_ms: int, window_ms: int, bucket_ms: int
) -> int | None:
    """Milliseconds until enough old buckets leave the window for `need` to fit.

    `buckets` are (index, amount) pairs inside the window. None when `need` alone
    exceeds the limit, so no wait helps.
    """
    if need > limit:
        return None
    excess = used + need - limit
    if excess <= 0:
        return 0
    freed = 0
    nbuckets = window_ms // bucket_ms
    for index, amount in sorted(buckets):
        freed += amount
        if freed >= excess:
            return max(0, (index + nbuckets) * bucket_ms - now_ms)
    return window_ms  # reconciliation debt beyond the window's content: a full window clears it


def reset_ms(
    buckets: list[tuple[int, int]], used: int, need: int, limit: int, now_ms: int, window_ms: int, bucket_ms: int
) -> int:
    """Milliseconds until `need` more fits under `limit` (0: it fits now); a need
    larger than the whole limit waits until the window is empty. 0 for no limit."""
    if limit < 0:
        return 0
    wait = time_until_fits(buckets, used, min(need, limit), limit, now_ms, window_ms, bucket_ms)
    return window_ms if wait is None else wait


def format_reset(ms: int) -> str:
    """OpenAI's reset format: "1s", "6m0s", "20ms"."""
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    seconds = math.ceil(ms / 1000)
    if seconds < 60:
        return f"{seconds}s"
    return f"{seconds // 60}m{seconds % 60}s"


def refunded(reservation: Reservation) -> list[ScopeState]:
    """The reservation's scope states as they stand once it is refunded whole (a
    request turned away before any work): its request, tokens and leases given back."""
    return [
        replace(
            s,
            requests_remaining=s.requests_remaining + 1,
            tokens_remaining=s.tokens_remaining + reservation.tokens,
            concurrent=max(0, s.concurrent - reservation.units),
        )
        for s in reservation.states
    ]


def ratelimit_headers(states: list[ScopeState]) -> dict[str, str]:
    """x-ratelimit-* for the tightest scope of each kind (the one a client hits first)."""
    headers: dict[str, str] = {}
    # (limit, remaining, reset ms) of each window of each scope.
    windows = {
        "requests": [(s.requests_limit, s.requests_remaining, s.requests_reset_ms) for s in states],
        "tokens": [(s.tokens_limit, s.tokens_remaining, s.tokens_reset_ms) for s in states],
    }
    for kind, scopes in windows.items():
        limited = [w for w in scopes if w[0] >= 0]
        if limited:
            limit, remaining, reset = min(limited, key=lambda w: w[1])
            headers[f"x-ratelimit-limit-{kind}"] = str(limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, remaining))
            headers[f"x-ratelimit-reset-{kind}"] = format_reset(reset)
    return headers


@dataclass(frozen=True, slots=True)
class TokenBudget:
    """What a request reserves: the prompt once plus every choice's completion
    budget, which is the request's max_tokens or, when it sent none, the
    tenant's cap (`from_cap`)."""

    prompt: int
    per_choice: int
    choices: int
    from_cap: bool

    @property
    def total(self) -> int:
        return self.prompt + self.per_choice * self.choices


def token_budget(prompt_tokens_estimate: int, max_tokens: int | None, n: int, cap: int) -> TokenBudget:
    completion = max_tokens if max_tokens is not None else cap
    return TokenBudget(max(0, prompt_tokens_estimate), max(0, completion), max(1, n), max_tokens is None)


def carry_overrun(window_used: int, overrun: int, limit: int, current: int, buckets: int) -> list[tuple[int, int]]:
    """Where an overrun charged at release goes beyond the current bucket: the part of
    `overrun` that put the window's use (`window_used`, the overrun included) past
    `limit` moves into the buckets one, two, ... windows ahead, at most `limit` each
    (the last of MAX_CARRY_WINDOWS holds the rest). A bucket ahead counts from now
    until it leaves the window, so the tenant is held out until the debt is paid.
    Returns (bucket index, amount) pairs; the caller takes their sum off `current`.
    `buckets`: the window's number of buckets."""
    if limit <= 0 or overrun <= 0:
        return []
    excess = min(overrun, window_used - limit)
    moves: list[tuple[int, int]] = []
    k = 1
    while excess > 0:
        part = excess if k == MAX_CARRY_WINDOWS else min(excess, limit)
        moves.append((current + k * buckets, part))
        excess -= part
        k += 1
    return moves
