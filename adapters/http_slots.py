"""The connection slots of one pool of the fast client (adapters/http_client.py), and of
an https transport's POSTs (adapters/transport.py):
how many are free and the requests waiting for one, first come first served. A
semaphore's rules without its per-call checks: the pool takes a free slot itself
(`free > 0 and not waiters`, one comparison) and waits here only when there is none."""

from __future__ import annotations

import asyncio
import collections
import contextlib


class Slots:
    __slots__ = ("free", "waiters")

    def __init__(self, limit: int) -> None:
        self.free = limit
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self, timeout: float | None) -> None:
        """One slot: a free one at once, else a wait of at most `timeout` (TimeoutError)."""
        if self.free > 0 and not self.waiters:
            self.free -= 1
        else:
            await self.wait(timeout)

    async def wait(self, timeout: float | None) -> None:
        """Wait for a released slot, at most `timeout` seconds (None: no limit;
        TimeoutError past it). A slot handed over at the moment the wait ends (a
        timeout, a cancellation) is given back rather than lost."""
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(slot)
        try:
            async with asyncio.timeout(timeout):
                await slot
        except BaseException:
            if slot.done() and not slot.cancelled():
                self.release()
            else:
                slot.cancel()
                with contextlib.suppress(ValueError):  # a release may have skipped it already
                    self.waiters.remove(slot)
            raise

    def release(self) -> None:
        """A slot is free: the longest waiter's, else back among the free ones."""
        waiters = self.waiters
        while waiters:
            slot = waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                return
        self.free += 1
