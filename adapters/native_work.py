"""The native engine's text work (chat templates, tokenizing, detokenizing) off the
event loop, in a small pool of threads (docs/architecture.md, "Native engine", has
why threads help: `encode_batch` releases the interpreter lock). Fair and bounded
per tenant: the workers take the tenants' queues in turn; past `per_tenant` pieces
waiting for one tenant, or `max_waiting` in all, a call is refused with 429 and
Retry-After (the client's answer, never a backend fault: no failover, nothing
ejected). The wait holds the tenant's own concurrency lease.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from adapters.errors import GatewayError

T = TypeVar("T")

WORKERS = 2
PER_TENANT = 64  # pieces one tenant may have waiting
MAX_WAITING = 256


class TextWork:
    """One process's pool for the native backends' text work (they share the CPUs)."""

    def __init__(self, workers: int = WORKERS, per_tenant: int = PER_TENANT, max_waiting: int = MAX_WAITING) -> None:
        self.workers, self.per_tenant, self.max_waiting = workers, per_tenant, max_waiting
        self._pool: ThreadPoolExecutor | None = None
        # tenant -> its waiting pieces; the first tenant is served next, then goes last.
        self._queues: OrderedDict[str, deque[tuple[Callable[[], Any], asyncio.Future[Any]]]] = OrderedDict()
        self.running = 0
        self.refused = 0

    def waiting(self, tenant: str | None = None) -> int:
        if tenant is not None:
            return len(self._queues.get(tenant, ()))
        return sum(len(q) for q in self._queues.values())

    async def run(self, tenant: str | None, fn: Callable[[], T]) -> T:
        """`fn()` on a worker thread when the tenant's turn comes."""
        who = tenant or ""
        if self.waiting(who) >= self.per_tenant or self.waiting() >= self.max_waiting:
            self.refused += 1
            raise GatewayError(
                429,
                "Too many of your requests are waiting to be tokenized on this model; retry shortly.",
                code="tokenizer_busy",
                retry_after=1.0,
            )
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        entry = (fn, done)
        self._queues.setdefault(who, deque()).append(entry)
        self._pump(loop)
        try:
            return await done
        except asyncio.CancelledError:
            queue = self._queues.get(who)
            if queue is not None and entry in queue:  # not started: it never will
                queue.remove(entry)
                if not queue:
                    del self._queues[who]
            raise

    def _pump(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="native-text")
        while self.running < self.workers and self._queues:
            who, queue = next(iter(self._queues.items()))
            fn, done = queue.popleft()
            if queue:
                self._queues.move_to_end(who)  # its next piece waits for the others' turn
            else:
                del self._queues[who]
            if done.done():
                continue
            self.running += 1
            work = self._pool.submit(fn)
            # Finished when the thread is, not when the awaiting request is cancelled:
            # running work holds its worker until then.
            work.add_done_callback(self._finisher(loop, done))

    def _finisher(self, loop: asyncio.AbstractEventLoop, done: asyncio.Future[Any]) -> Callable[[Future[Any]], None]:
        def finished(work: Future[Any]) -> None:
            loop.call_soon_threadsafe(self._finish, loop, work, done)

        return finished

    def _finish(self, loop: asyncio.AbstractEventLoop, work: Future[Any], done: asyncio.Future[Any]) -> None:
        self.running -= 1
        if not done.done():
            exc = work.exception()
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(work.result())
        self._pump(loop)


TEXT_WORK = TextWork()
