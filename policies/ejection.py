"""Outlier ejection (circuit breaking) for one pool's backends, from the outcomes
dispatch reports before each attempt's first byte: ejected after `consecutive_failures`
or an `error_rate` over `window_s`, held out for a doubling backoff, then one real
request is the half-open probe; at most `max_ejected_share` of the pool out at once. A
failure a request can cause ejects only when it is not one tenant's alone. Pure state
and arithmetic with an injectable clock (docs/architecture.md, "Routing").
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from pydantic import Field

from adapters.errors import FailureKind as FailureKind  # what dispatch reports: the kind an error carries
from policies.settings import Settings

# The failures a request's content can cause; the others are the backend's whoever asks.
REQUEST_CAUSABLE = frozenset({FailureKind.SERVER_ERROR, FailureKind.TIMEOUT})
MAX_TENANTS_SEEN = 1024  # tenants remembered per backend for the window (oldest dropped)


class CircuitState(Enum):
    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


class EjectionConfig(Settings):
    """`models.<name>.ejection`: outlier ejection and the retry budget."""

    consecutive_failures: int = Field(5, ge=1)
    error_rate: float = Field(0.5, gt=0, le=1)
    min_requests: int = Field(20, ge=1)
    window_s: float = Field(10.0, gt=0)  # the error rate's window, and the retry budget's
    base_ejection_s: float = Field(5.0, gt=0)
    max_ejection_s: float = Field(300.0, gt=0)
    max_ejected_share: float = Field(0.5, ge=0, le=1)
    probe_timeout_s: float = Field(10.0, gt=0)
    retry_ratio: float = Field(0.2, ge=0)  # retries per request over the window
    # Twice consecutive_failures: ejecting one dead backend of a quiet pool costs no client an error.
    min_retries: int = Field(10, ge=0)


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of one backend's circuit: what a log line and the metrics say."""

    backend: str
    state: CircuitState
    reason: str  # consecutive_failures, error_rate, probe_failed, probe_succeeded
    ejected_for_s: float = 0.0

    def describe(self) -> str:
        if self.state is CircuitState.OPEN:
            return f"backend {self.backend} ejected for {self.ejected_for_s:g}s ({self.reason})"
        return f"backend {self.backend} back in service ({self.reason})"


class _Window:
    """Counts per whole second over the last `seconds` seconds: O(1) per event."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._buckets: deque[list[int]] = deque()  # [second, count a, count b]

    def add(self, now: float, a: int = 0, b: int = 0) -> None:
        second = int(now)
        buckets = self._buckets
        if buckets and (bucket := buckets[-1])[0] == second:
            bucket[1] += a
            bucket[2] += b
        else:
            self._buckets.append([second, a, b])
            self.totals(now)  # a new second: what left the window goes (a backend that never fails holds no more)

    def totals(self, now: float) -> tuple[int, int]:
        while self._buckets and self._buckets[0][0] <= now - self.seconds:
            self._buckets.popleft()
        return sum(x[1] for x in self._buckets), sum(x[2] for x in self._buckets)

    def clear(self) -> None:
        self._buckets.clear()


@dataclass
class _Backend:
    window: _Window
    state: CircuitState = CircuitState.CLOSED
    consecutive: int = 0
    ejections: int = 0  # in a row, for the backoff
    until: float = 0.0  # end of the current ejection
    readmitted_at: float = -math.inf
    probe_started: float | None = None
    failures: dict[FailureKind, int] = field(default_factory=dict)
    reason: str = ""  # why the last ejection happened
    ejected: dict[str, int] = field(default_factory=dict)  # ejections by reason, since the start
    served: dict[str, float] = field(default_factory=dict)  # tenant -> its last success here
    failed: dict[str, float] = field(default_factory=dict)  # tenant -> its last failure here

    def witnessed(self, now: float, window_s: float) -> bool:
        """Whether the window's failures are not one tenant's alone: two tenants failed,
        or no tenant other than the failing one was served."""
        failing = {t for t, at in self.failed.items() if at > now - window_s}
        if len(failing) >= 2:
            return True
        return not any(at > now - window_s for t, at in self.served.items() if t not in failing)


def _remember(seen: dict[str, float], tenant: str, now: float) -> None:
    seen.pop(tenant, None)
    seen[tenant] = now  # insertion order is recency: the oldest goes first
    if len(seen) > MAX_TENANTS_SEEN:
        del seen[next(iter(seen))]


class OutlierDetector:
    def __init__(
        self,
        backends: Iterable[str],
        config: EjectionConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or EjectionConfig()
        self.clock = clock
        self._backends = {name: _Backend(_Window(self.config.window_s)) for name in backends}

    # ---- outcomes --------------------------------------------------------------------

    def record_success(self, backend: str, now: float | None = None, *, tenant: str = "") -> Transition | None:
        now = self.clock() if now is None else now
        b = self._backends[backend]
        _remember(b.served, tenant, now)
        b.window.add(now, a=1)
        b.consecutive = 0
        if b.state is CircuitState.HALF_OPEN:
            b.state, b.probe_started, b.readmitted_at = CircuitState.CLOSED, None, now
            b.window.clear()
            return Transition(backend, CircuitState.CLOSED, "probe_succeeded")
        return None

    def record_failure(
        self, backend: str, kind: FailureKind, now: float | None = None, *, tenant: str = ""
    ) -> Transition | None:
        """`tenant`: whose request failed ("" when unknown: one tenant, as with auth off)."""
        now = self.clock() if now is None else now
        b = self._backends[backend]
        b.failures[kind] = b.failures.get(kind, 0) + 1
        if b.state is CircuitState.OPEN:
            return None  # a request sent before the ejection; the circuit is open already
        if b.state is CircuitState.HALF_OPEN:
            return self._eject(backend, b, now, "probe_failed")
        b.window.add(now, b=1)
        b.consecutive += 1
        if kind in REQUEST_CAUSABLE:
            _remember(b.failed, tenant, now)
            if not b.witnessed(now, self.config.window_s):
                return None  # one tenant's failures while others are served: theirs, not the backend's
        if b.consecutive >= self.config.consecutive_failures:
            return self._eject(backend, b, now, "consecutive_failures")
        ok, failed = b.window.totals(now)
        if ok + failed >= self.config.min_requests and failed >= self.config.error_rate * (ok + failed):
            return self._eject(backend, b, now, "error_rate")
        return None

    def _eject(self, name: str, b: _Backend, now: float, reason: str) -> Transition | None:
        cfg = self.config
        if b.state is CircuitState.CLOSED:
            allowed = max(1, math.floor(cfg.max_ejected_share * len(self._backends)))
            if sum(1 for other in self._backends.values() if other.state is not CircuitState.CLOSED) >= allowed:
                return None  # the cap: this one stays in service
            if now - b.readmitted_at >= cfg.max_ejection_s:
                b.ejections = 0  # long enough in service: the backoff starts over
        b.ejections += 1
        duration = min(cfg.base_ejection_s * 2 ** (b.ejections - 1), cfg.max_ejection_s)
        b.state, b.until, b.probe_started, b.consecutive = CircuitState.OPEN, now + duration, None, 0
        b.window.clear()
        b.reason = reason
        b.ejected[reason] = b.ejected.get(reason, 0) + 1
        return Transition(name, CircuitState.OPEN, reason, duration)

    # ---- the gate ------------------------------------------------------------------------

    def state(self, backend: str, now: float | None = None) -> CircuitState:
        """The circuit as it stands (no side effect): OPEN until the backoff ends."""
        now = self.clock() if now is None else now
        b = self._backends[backend]
        if b.state is CircuitState.OPEN and now >= b.until:
            return CircuitState.HALF_OPEN
        return b.state

    def admits(self, backend: str, now: float | None = None) -> bool:
        """Whether `is_ejected` would let a request through now, without granting the
        half-open probe: what a routing view shows."""
        now = self.clock() if now is None else now
        b = self._backends[backend]
        if b.state is CircuitState.CLOSED:
            return True
        if b.state is CircuitState.OPEN and now < b.until:
            return False
        return b.probe_started is None or now - b.probe_started >= self.config.probe_timeout_s

    def is_ejected(self, backend: str, now: float | None = None) -> bool:
        """Whether to keep requests off `backend` now. In half-open, the first caller
        (and the first after a probe that never reported back) is the probe: False."""
        now = self.clock() if now is None else now
        b = self._backends[backend]
        if b.state is CircuitState.CLOSED:
            return False
        if b.state is CircuitState.OPEN:
            if now < b.until:
                return True
            b.state = CircuitState.HALF_OPEN
        if b.probe_started is not None and now - b.probe_started < self.config.probe_timeout_s:
            return True
        b.probe_started = now
        return False

    def describe(self, backend: str, now: float | None = None) -> dict:
        """What `/readyz` shows: the circuit, and while it is not closed, why and
        for how long more it is held out (0 once a half-open probe may go)."""
        now = self.clock() if now is None else now
        b = self._backends[backend]
        state = self.state(backend, now)
        if state is CircuitState.CLOSED:
            return {"circuit": "closed"}
        return {"circuit": state.name.lower(), "reason": b.reason, "ejected_for_s": round(max(0.0, b.until - now), 3)}

    def ejections(self, backend: str) -> dict[str, int]:
        """Ejections of `backend` by reason, since the start (for the metrics)."""
        return dict(self._backends[backend].ejected)

    def failures(self, backend: str) -> dict[FailureKind, int]:
        """Failures of `backend` by kind, since the start (for the metrics)."""
        return dict(self._backends[backend].failures)
