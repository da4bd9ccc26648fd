"""The in-process quota store: the same semantics as the Redis store, for one
gateway process (and as the local fallback when Redis is down and the policy is
fail-open). Every method runs without awaiting in the middle, so on one event
loop each decision is atomic just like a Lua script."""

from __future__ import annotations

import time
from collections.abc import Callable

from policies.quota import (
    BUCKET_MS,
    UNLIMITED,
    WINDOW_MS,
    QuotaAsk,
    QuotaExceeded,
    QuotaStore,
    Reservation,
    ScopeState,
    lease_members,
    reset_ms,
    time_until_fits,
)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class MemoryQuotaStore(QuotaStore):
    kind = "memory"

    def __init__(
        self, *, window_ms: int = WINDOW_MS, bucket_ms: int = BUCKET_MS, clock_ms: Callable[[], int] = _wall_ms
    ) -> None:
        if window_ms % bucket_ms:
            raise ValueError("window_ms must be a multiple of bucket_ms")
        self.window_ms = window_ms
        self.bucket_ms = bucket_ms
        self._clock_ms = clock_ms
        # (tenant, scope, "rpm"|"tpm") -> {bucket index: amount}
        self._windows: dict[tuple[str, str, str], dict[int, int]] = {}
        # (tenant, scope) -> {lease id: expiry ms}
        self._leases: dict[tuple[str, str], dict[str, int]] = {}

    def _window(self, key: tuple[str, str, str], now_ms: int) -> tuple[int, list[tuple[int, int]]]:
        buckets = self._windows.get(key)
        if not buckets:
            return 0, []
        oldest = now_ms // self.bucket_ms - self.window_ms // self.bucket_ms + 1
        for index in [i for i in buckets if i < oldest]:
            del buckets[index]
        items = list(buckets.items())
        return sum(v for _, v in items), items

    def _live_leases(self, key: tuple[str, str], now_ms: int) -> dict[str, int]:
        leases = self._leases.setdefault(key, {})
        for lease_id in [k for k, exp in leases.items() if exp <= now_ms]:
            del leases[lease_id]
        return leases

    async def take(self, ask: QuotaAsk) -> Reservation:
        tenant, scopes, tokens, lease_id, units = ask.tenant, ask.scopes, ask.tokens, ask.lease_id, ask.units
        now = self._clock_ms()
        current = now // self.bucket_ms
        states: list[ScopeState] = []
        failure: tuple[str, str, int | None, int, int] | None = None
        for scope in scopes:
            rpm_used, rpm_buckets = self._window((tenant, scope.name, "rpm"), now)
            tpm_used, tpm_buckets = self._window((tenant, scope.name, "tpm"), now)
            leases = self._live_leases((tenant, scope.name), now)
            if failure is None:
                if scope.requests_per_window != UNLIMITED and rpm_used + 1 > scope.requests_per_window:
                    wait = time_until_fits(
                        rpm_buckets, rpm_used, 1, scope.requests_per_window, now, self.window_ms, self.bucket_ms
                    )
                    failure = (scope.name, "requests", wait, 1, scope.requests_per_window)
                elif scope.tokens_per_window != UNLIMITED and tpm_used + tokens > scope.tokens_per_window:
                    wait = time_until_fits(
                        tpm_buckets, tpm_used, tokens, scope.tokens_per_window, now, self.window_ms, self.bucket_ms
                    )
                    failure = (scope.name, "tokens", wait, tokens, scope.tokens_per_window)
                elif scope.max_concurrent != UNLIMITED and len(leases) + units > scope.max_concurrent:
                    failure = (
                        scope.name,
                        "concurrency",
                        None if units > scope.max_concurrent else 1000,
                        units,
                        scope.max_concurrent,
                    )
            states.append(
                ScopeState(
                    scope=scope.name,
                    requests_limit=scope.requests_per_window,
                    requests_remaining=scope.requests_per_window - rpm_used,
                    requests_reset_ms=self._reset(rpm_buckets, rpm_used, 1, scope.requests_per_window, now),
                    tokens_limit=scope.tokens_per_window,
                    tokens_remaining=scope.tokens_per_window - tpm_used,
                    tokens_reset_ms=self._reset(tpm_buckets, tpm_used, tokens, scope.tokens_per_window, now),
                    concurrent=len(leases),
                )
            )
        if failure is not None:
            name, limit, wait, requested, value = failure
            raise QuotaExceeded(name, limit, None if wait is None else wait / 1000, states, requested, value)
        for scope, state in zip(scopes, states):
            rpm = self._windows.setdefault((tenant, scope.name, "rpm"), {})
            rpm[current] = rpm.get(current, 0) + 1
            tpm = self._windows.setdefault((tenant, scope.name, "tpm"), {})
            tpm[current] = tpm.get(current, 0) + tokens
            leases = self._leases[(tenant, scope.name)]
            for member in lease_members(lease_id, units):
                leases[member] = now + ask.lease_ttl_ms
            state.requests_remaining -= 1
            state.tokens_remaining -= tokens
            state.concurrent += units
            # After the charge: when could the same request be sent again.
            rpm_used, rpm_buckets = self._window((tenant, scope.name, "rpm"), now)
            tpm_used, tpm_buckets = self._window((tenant, scope.name, "tpm"), now)
            state.requests_reset_ms = self._reset(rpm_buckets, rpm_used, 1, scope.requests_per_window, now)
            state.tokens_reset_ms = self._reset(tpm_buckets, tpm_used, tokens, scope.tokens_per_window, now)
        return Reservation(tenant, scopes, lease_id, current, tokens, states, self.kind, units)

    def _reset(self, buckets: list[tuple[int, int]], used: int, need: int, limit: int, now: int) -> int:
        return reset_ms(buckets, used, need, limit, now, self.window_ms, self.bucket_ms)

    async def ping(self) -> None:
        return None

    async def reset_connections(self) -> None:
        return None

    async def release(
        self, reservation: Reservation, used_tokens: int, refund_request: bool = False, *, replay: bool = False
    ) -> None:
        now = self._clock_ms()
        current = now // self.bucket_ms
        oldest = current - self.window_ms // self.bucket_ms + 1
        delta = used_tokens - reservation.tokens
        for scope in reservation.scopes:
            leases = self._leases.get((reservation.tenant, scope.name), {})
            if replay and reservation.lease_id not in leases:
                continue  # released already (see QuotaStore.release)
            tpm = self._windows.setdefault((reservation.tenant, scope.name, "tpm"), {})
            if delta < 0:
                if reservation.bucket >= oldest and reservation.bucket in tpm:
                    tpm[reservation.bucket] = max(0, tpm[reservation.bucket] + delta)
            elif delta > 0:
                tpm[current] = tpm.get(current, 0) + delta
            if refund_request:
                rpm = self._windows.get((reservation.tenant, scope.name, "rpm"), {})
                if reservation.bucket >= oldest and rpm.get(reservation.bucket, 0) > 0:
                    rpm[reservation.bucket] -= 1
            for member in reservation.lease_members():
                leases.pop(member, None)

    async def heartbeat(self, reservations: list[Reservation], lease_ttl_ms: int) -> None:
        now = self._clock_ms()
        for r in reservations:
            for scope in r.scopes:
                leases = self._leases.get((r.tenant, scope.name), {})
                for member in r.lease_members():
                    if member in leases:
                        leases[member] = now + lease_ttl_ms

    async def concurrent(self, tenant: str, scope: str) -> int:
        return len(self._live_leases((tenant, scope), self._clock_ms()))

    async def aclose(self) -> None:
        return None
