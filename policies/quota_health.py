"""Whether the shared quota store answers, and when to ask it again. The request path
never waits on a store it knows is down, and its traffic never decides when the store
is tried again: a failed call marks it down (reported once), then one background probe
asks on its own schedule (`first_delay_s`, doubling to `max_delay_s`); its first answer
marks the store up again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from policies.quota import QuotaStoreUnavailable

log = logging.getLogger("switchyard.quota")

FIRST_PROBE_DELAY_S = 0.05
MAX_PROBE_DELAY_S = 0.5


@dataclass(frozen=True, slots=True)
class StoreTransition:
    """The store went down (`reason` says why) or came back after `down_for_s`."""

    up: bool
    reason: str = ""
    down_for_s: float = 0.0


class StoreHealth:
    def __init__(
        self,
        probe: Callable[[], Awaitable[None]],
        on_transition: Callable[[StoreTransition], None],
        *,
        first_delay_s: float = FIRST_PROBE_DELAY_S,
        max_delay_s: float = MAX_PROBE_DELAY_S,
    ) -> None:
        """`probe` raises QuotaStoreUnavailable while the store does not answer;
        its own timeout bounds how long one probe takes."""
        self._probe = probe
        self._on_transition = on_transition
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self._up = True
        self._down_since = 0.0
        self._prober: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        return self._up

    def mark_down(self, reason: str) -> None:
        """A call failed. The first failure starts the probe; later ones, while
        it is down, change nothing."""
        if not self._up:
            return
        self._up = False
        self._down_since = time.monotonic()
        self._on_transition(StoreTransition(up=False, reason=reason))
        self._prober = asyncio.get_running_loop().create_task(self._probe_until_up(), name="quota-store-probe")

    async def _probe_until_up(self) -> None:
        delay = self.first_delay_s
        while True:
            await asyncio.sleep(delay)
            try:
                await self._probe()
            except QuotaStoreUnavailable:
                delay = min(delay * 2, self.max_delay_s)
                continue
            except Exception:  # the probe must outlive any one failure, or the store stays down for good
                log.exception("quota store probe failed")
                delay = self.max_delay_s
                continue
            self._up = True
            self._on_transition(StoreTransition(up=True, down_for_s=time.monotonic() - self._down_since))
            return

    async def aclose(self) -> None:
        if self._prober is not None:
            await stop_task(self._prober)


async def stop_task(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait until it has ended, cancelling again if a
    cancellation was lost: on Python 3.11 `asyncio.wait_for` (redis-py sends each
    command through it) swallows a cancellation that lands just as the call it
    wraps completes, and a loop that lost it would run, and be awaited, forever."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
