"""The retry budget of one model pool: how many failovers it may still make.

Failover before the first byte (gateway/serving/dispatch.py) turns one failing request
into several upstream attempts. When a whole pool fails, retrying every request
`max_retries + 1` times multiplies the load on backends that are already in
trouble. So retries are allowed while they stay under `ratio` of the requests
seen over the last `window_s` seconds, with `minimum` always allowed (a quiet
pool must still be able to fail over its one request). Past that, the request's
error goes to the client as it is.

Pure state and arithmetic with an injectable clock; one per pool, shared by its
requests and those that fall back to it from another model.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class RetryBudget:
    def __init__(
        self,
        ratio: float = 0.2,
        minimum: int = 3,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ratio = ratio
        self.minimum = minimum
        self.window_s = window_s
        self.clock = clock
        # One bucket per whole second: [second, requests, retries]; O(1) per event.
        self._buckets: deque[list[int]] = deque()
        self.refused = 0  # retries refused since the start (for the metrics)

    def _add(self, now: float, requests: int, retries: int) -> None:
        second = int(now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += requests
            self._buckets[-1][2] += retries
        else:
            self._buckets.append([second, requests, retries])

    def totals(self, now: float | None = None) -> tuple[int, int]:
        """(requests, retries) over the window ending `now`."""
        now = self.clock() if now is None else now
        while self._buckets and self._buckets[0][0] <= now - self.window_s:
            self._buckets.popleft()
        return sum(b[1] for b in self._buckets), sum(b[2] for b in self._buckets)

    def record_request(self, now: float | None = None) -> None:
        """Count one original request (not a retry)."""
        self._add(self.clock() if now is None else now, 1, 0)

    def exhausted(self, now: float | None = None) -> bool:
        """Whether no retry fits now (asked before waiting out a backoff that would
        lead to one); a True counts as a refused retry."""
        requests, retries = self.totals(now)
        if retries >= max(self.minimum, self.ratio * requests):
            self.refused += 1
            return True
        return False

    def may_retry(self, now: float | None = None) -> bool:
        """Whether one more retry fits; a True counts as that retry."""
        now = self.clock() if now is None else now
        requests, retries = self.totals(now)
        if retries >= max(self.minimum, self.ratio * requests):
            self.refused += 1
            return False
        self._add(now, 0, 1)
        return True
