"""Backpressure: a bounded queue per model, with priority bands and fairness between
tenants inside a band, dispatching only while the model's backends have capacity
(`capacity(model)`, in generations). A full queue answers 429 or 503 with Retry-After,
pushing out the newest request of the tenant holding the most; a wait past
`max_wait_s` is 503, past the client's deadline 504. docs/architecture.md, "Tenancy",
has the rules.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from adapters.base import LoadSnapshot
from adapters.errors import GatewayError, deadline_exceeded
from policies.saturation import DEFAULT_DETECTOR, SaturationDetector

CapacityFn = Callable[[str], "int | None"]
ClientGone = Callable[[], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class BackendLoad:
    """What the capacity provider knows about one backend of a model."""

    max_inflight: int | None
    inflight: int
    load: LoadSnapshot | None = None


def model_capacity(
    backends: list[BackendLoad], detector: SaturationDetector = DEFAULT_DETECTOR, now: float | None = None
) -> int | None:
    """How many requests the model's backends can hold now: each backend's
    max_inflight, except that one whose runtime reports saturation holds only
    what it already has (so nothing new is dispatched to it until it drains).
    Stale load is the detector's business: then max_inflight alone counts.
    None = unbounded."""
    total = 0
    for b in backends:
        if detector.check(b.inflight, b.max_inflight, b.load, now).reported_by_runtime:
            total += b.inflight
        elif b.max_inflight is None:
            return None
        else:
            total += b.max_inflight
    return total


class ClientGoneWhileQueued(Exception):
    """The client left while its request waited; nothing was dispatched."""


@dataclass(eq=False)
class _Waiter:
    tenant: str
    tier: int
    future: asyncio.Future[None]
    units: int = 1
    dispatched: bool = False


@dataclass
class _Band:
    # tenant -> its FIFO; `turns` is the round-robin order of tenants with waiters.
    queues: dict[str, deque[_Waiter]] = field(default_factory=dict)
    turns: deque[str] = field(default_factory=deque)


@dataclass
class _ModelQueue:
    in_flight: int = 0
    waiting: int = 0
    bands: dict[int, _Band] = field(default_factory=dict)
    done_times: deque[float] = field(default_factory=lambda: deque(maxlen=64))


@dataclass(eq=False)
class Slot:
    """A dispatched request's place in its model's in-flight count: `units` of it."""

    model: str
    waited_s: float
    units: int = 1
    released: bool = False


class AdmissionQueue:
    def __init__(
        self,
        *,
        max_queue: int,
        max_wait_s: float,
        full_status: int = 429,
        capacity: CapacityFn | None = None,
        poll_s: float = 0.1,
    ) -> None:
        self.max_queue = max_queue
        self.max_wait_s = max_wait_s
        self.full_status = full_status
        self.capacity: CapacityFn = capacity or (lambda model: None)
        # How often a waiter re-checks its client and the capacity (which may
        # rise without a release, when a runtime stops reporting saturation).
        self.poll_s = poll_s
        self._models: dict[str, _ModelQueue] = {}

    def set_capacity_provider(self, capacity: CapacityFn) -> None:
        self.capacity = capacity

    def _has_room(self, model: str, q: _ModelQueue, units: int) -> bool:
        cap = self.capacity(model)
        if cap is None:
            return True
        # A request larger than the whole capacity would never fit: it runs alone.
        return q.in_flight + units <= cap or (units > cap > 0 and q.in_flight == 0)

    def models(self) -> list[str]:
        return list(self._models)

    def in_flight(self, model: str) -> int:
        q = self._models.get(model)
        return q.in_flight if q else 0

    def waiting(self, model: str) -> int:
        q = self._models.get(model)
        return q.waiting if q else 0

    def drain_retry_after(self, model: str) -> float:
        """Seconds until the queue ahead of a newcomer should have drained."""
        q = self._models.get(model)
        if q is None or not q.done_times:
            return min(self.max_wait_s, 1.0)
        # Counting up to now keeps a long-idle backend from looking fast.
        span = time.monotonic() - q.done_times[0]
        rate = len(q.done_times) / max(span, 1e-3)
        return max(1.0, min(self.max_wait_s, (q.waiting + 1) / rate))

    async def enter(
        self,
        model: str,
        tenant: str,
        tier: int,
        *,
        deadline: float | None = None,
        client_gone: ClientGone | None = None,
        units: int = 1,
    ) -> Slot:
        """Wait for `units` of the model's capacity (the generations the request
        starts). `deadline` is a time.monotonic() value."""
        q = self._models.get(model)
        if q is None:  # not setdefault: that would build a queue on every call
            q = self._models[model] = _ModelQueue()
        start = time.monotonic()
        if q.waiting == 0 and self._has_room(model, q, units):
            q.in_flight += units
            return Slot(model, 0.0, units)
        if q.waiting >= self.max_queue:
            victim = self._push_out_candidate(q, tenant, tier)
            if victim is None:
                raise self._full(model)
            # Longest-queue drop: the tenant holding the most places gives one
            # up, so a flood cannot fill the queue and lock everyone else out.
            self._remove(q, victim)
            victim.future.set_exception(self._full(model))
        limit = start + self.max_wait_s
        client_limit = deadline is not None and deadline < limit
        if deadline is not None:
            limit = min(limit, deadline)
        waiter = _Waiter(tenant, tier, asyncio.get_running_loop().create_future(), units)
        self._push(q, waiter)
        try:
            while True:
                self._dispatch(model, q)
                remaining = limit - time.monotonic()
                if waiter.future.done():
                    if waiter.dispatched:
                        return Slot(model, time.monotonic() - start, units)
                    pushed_out = waiter.future.exception()  # by a tenant with fewer places
                    assert pushed_out is not None
                    raise pushed_out
                if remaining <= 0:
                    if client_limit:
                        raise deadline_exceeded(time.monotonic() - start, model)
                    raise GatewayError(
                        503,
                        f"The request waited {time.monotonic() - start:.1f}s in the queue for "
                        f"model `{model}` and passed its deadline.",
                        code="queue_timeout",
                        retry_after=self.drain_retry_after(model),
                    )
                # asyncio.wait, not wait_for: on Python 3.11 wait_for swallows a
                # cancellation that arrives just after the future completed (our slot
                # dispatched), and the task would carry on as if never cancelled. A
                # pushed-out waiter's error is raised at the top of the loop.
                await asyncio.wait((waiter.future,), timeout=min(self.poll_s, remaining))
                if not waiter.future.done() and client_gone is not None and await client_gone():
                    raise ClientGoneWhileQueued()
        except BaseException:
            if waiter.dispatched:
                # Dispatched while we were leaving: hand the slot to the next one.
                q.in_flight -= units
                self._dispatch(model, q)
            elif not waiter.future.done():
                waiter.future.cancel()
                self._remove(q, waiter)
            raise

    def _full(self, model: str) -> GatewayError:
        return GatewayError(
            self.full_status,
            f"The queue for model `{model}` is full ({self.max_queue} waiting); retry later.",
            code="queue_full",
            retry_after=self.drain_retry_after(model),
        )

    def _push_out_candidate(self, q: _ModelQueue, tenant: str, tier: int) -> _Waiter | None:
        """The newest waiter of the tenant with the most places in bands not above
        `tier`, if it holds at least two more than `tenant` does."""
        mine = sum(len(b.queues.get(tenant, ())) for b in q.bands.values())
        best: deque[_Waiter] | None = None
        for band_tier in sorted(q.bands):
            if band_tier > tier:
                break
            for fifo in q.bands[band_tier].queues.values():
                if best is None or len(fifo) > len(best):
                    best = fifo
        if best is None or len(best) <= mine + 1:
            return None
        return best[-1]

    def release(self, slot: Slot) -> None:
        """Idempotent: free the slot and dispatch whoever is next."""
        if slot.released:
            return
        slot.released = True
        q = self._models[slot.model]
        q.in_flight -= slot.units
        # Completions are the drain rate while a queue exists.
        q.done_times.append(time.monotonic())
        self._dispatch(slot.model, q)

    # ---- queue structure -------------------------------------------------

    def _push(self, q: _ModelQueue, w: _Waiter) -> None:
        band = q.bands.setdefault(w.tier, _Band())
        fifo = band.queues.get(w.tenant)
        if fifo is None:
            fifo = band.queues[w.tenant] = deque()
            band.turns.append(w.tenant)
        fifo.append(w)
        q.waiting += 1

    def _remove(self, q: _ModelQueue, w: _Waiter) -> None:
        band = q.bands.get(w.tier)
        fifo = band.queues.get(w.tenant) if band else None
        if band is None or fifo is None or w not in fifo:
            return
        fifo.remove(w)
        q.waiting -= 1
        if not fifo:
            del band.queues[w.tenant]
            band.turns.remove(w.tenant)

    def _next(self, q: _ModelQueue) -> _Waiter | None:
        """Whose turn it is (without taking it)."""
        for tier in sorted(q.bands, reverse=True):
            band = q.bands[tier]
            if band.turns:
                return band.queues[band.turns[0]][0]
        return None

    def _pop_next(self, q: _ModelQueue) -> _Waiter | None:
        for tier in sorted(q.bands, reverse=True):
            band = q.bands[tier]
            while band.turns:
                tenant = band.turns.popleft()
                fifo = band.queues[tenant]
                w = fifo.popleft()
                q.waiting -= 1
                if fifo:
                    band.turns.append(tenant)  # back of the line: the next tenant goes first
                else:
                    del band.queues[tenant]
                return w
        return None

    def _dispatch(self, model: str, q: _ModelQueue) -> None:
        while q.waiting:
            head = self._next(q)
            if head is not None and not head.future.done() and not self._has_room(model, q, head.units):
                return
            w = self._pop_next(q)
            if w is None:
                return
            if w.future.done():  # cancelled while queued; already counted out
                continue
            q.in_flight += w.units
            w.dispatched = True
            w.future.set_result(None)
