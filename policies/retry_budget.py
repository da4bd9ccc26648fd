"""The retry budget of one model pool: how many failovers it may still make. When a
whole pool fails, failover multiplies the load on backends already in trouble, so
retries stay under `retry_ratio` of the last `window_s`'s requests, `min_retries`
always allowed (docs/architecture.md, "Routing"). One per pool, shared by the requests
that fall back to it; its settings are the pool's `EjectionConfig`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from policies.ejection import EjectionConfig


class RetryBudget:
    def __init__(self, config: EjectionConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        # One bucket per whole second: [second, requests, retries]; O(1) per event.
        self._buckets: deque[list[int]] = deque()
        self.refused = 0  # retries refused since the start (for the metrics)

    def _add(self, now: float, requests: int, retries: int) -> None:
        second = int(now)
        buckets = self._buckets
        if buckets and (last := buckets[-1])[0] == second:
            last[1] += requests
            last[2] += retries
        else:
            buckets.append([second, requests, retries])
            self.totals(now)  # a new second: what left the window goes (a pool that never retries holds no more)

    def totals(self, now: float | None = None) -> tuple[int, int]:
        """(requests, retries) over the window ending `now`."""
        now = self.clock() if now is None else now
        while self._buckets and self._buckets[0][0] <= now - self.config.window_s:
            self._buckets.popleft()
        return sum(b[1] for b in self._buckets), sum(b[2] for b in self._buckets)

    def record_request(self, now: float | None = None) -> None:
        """Count one original request (not a retry)."""
        self._add(self.clock() if now is None else now, 1, 0)

    def exhausted(self, now: float | None = None) -> bool:
        """Whether no retry fits now (asked before waiting out a backoff that would
        lead to one); a True counts as a refused retry."""
        requests, retries = self.totals(now)
        if retries >= max(self.config.min_retries, self.config.retry_ratio * requests):
            self.refused += 1
            return True
        return False

    def may_retry(self, now: float | None = None) -> bool:
        """Whether one more retry fits; a True counts as that retry."""
        now = self.clock() if now is None else now
        requests, retries = self.totals(now)
        if retries >= max(self.config.min_retries, self.config.retry_ratio * requests):
            self.refused += 1
            return False
        self._add(now, 0, 1)
        return True

    def give_back(self, now: float | None = None) -> None:
        """Uncount one retry this request spent, once its failure proved its own (it
        followed the request to another backend): one tenant's poison prompts must not
        spend the failovers every tenant shares."""
        self.totals(now)
        for bucket in reversed(self._buckets):
            if bucket[2] > 0:
                bucket[2] -= 1
                return
