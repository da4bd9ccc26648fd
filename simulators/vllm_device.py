"""The modelled device of the vLLM double (`--prefill-ms-per-token F`, synthetic source).

One simulator is one GPU that prefills one prompt at a time, in arrival order: a
request waits for the device (counted as waiting), then holds it for
`ttft_ms + F x (prompt tokens - cached tokens)` ms, the cached tokens being what the
prefix cache holds when it gets the device; when the prefill ends its blocks enter
the cache (and are announced), the device passes on and its first token goes out.
Decoding then takes `itl_ms` per token without the device (vLLM batches decodes).
A request that leaves (disconnect, abort) while waiting or prefilling frees its
place at once and caches nothing. Every wait is an asyncio sleep: three simulators
on a 2-core machine behave as three independent GPUs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from simulators.request import SimRequest
from simulators.tokens import Generation, SyntheticGeneration


class Device:
    """A FIFO lock whose waiters can give up (cancellation or an abort wake-up)."""

    def __init__(self) -> None:
        self.busy = False
        self._queue: deque[asyncio.Future[None]] = deque()

    async def acquire(self, wake: asyncio.Future[None]) -> bool:
        """True once the device is this caller's; False if `wake` fired first."""
        if not self.busy and not self._queue:
            self.busy = True
            return True
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        try:
            await asyncio.wait([turn, wake], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._leave(turn)
            raise
        if turn.done():
            return True
        self._leave(turn)
        return False

    def _leave(self, turn: asyncio.Future[None]) -> None:
        if turn.done() and not turn.cancelled():
            self.release()  # handed over just as the caller left: pass it on
            return
        turn.cancel()
        try:
            self._queue.remove(turn)
        except ValueError:
            pass

    def release(self) -> None:
        while self._queue:
            turn = self._queue.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.busy = False


class DeviceGeneration(Generation):
    """A synthetic generation whose first token waits for, then holds, the device."""

    def __init__(self, inner: SyntheticGeneration, owner: Any, sim: SimRequest) -> None:
        self.inner = inner
        self.owner = owner  # the VllmSimulator: device, block cache, waiting count
        self.sim = sim
        self.prompt_tokens = inner.prompt_tokens
        self._aborted = False
        self._wake: asyncio.Future[None] | None = None

    def abort(self) -> None:
        self._aborted = True
        self.inner.abort()
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def __aiter__(self) -> Any:
        owner = self.owner
        self._wake = asyncio.get_running_loop().create_future()
        if self._aborted:
            self._wake.set_result(None)
        owner.waiting += 1
        try:
            granted = await owner.device.acquire(self._wake)
        finally:
            owner.waiting -= 1
        if granted:
            try:
                await self._prefill()
            finally:
                owner.device.release()
        async for token in self.inner:
            yield token

    async def _prefill(self) -> None:
        owner, sim, inner = self.owner, self.sim, self.inner
        ids = owner.prompt_ids(sim)
        cache = owner.kv_cache
        digests = cache.hashes(ids)
        cached = cache.lookup(ids, digests)
        if sim.reply is not None:
            sim.reply.cached = cached
        per_token = owner.opts.prefill_ms_per_token / 1000.0
        hold = inner.ttft + per_token * max(0, sim.prompt_tokens - cached)
        inner.ttft = 0.0  # the first token follows the prefill at once
        if hold > 0 and not self._aborted:
            assert self._wake is not None
            await asyncio.wait([self._wake], timeout=hold)
        if not self._aborted:
            cache.commit(ids, digests)
