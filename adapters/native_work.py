"""The native engine's text work off the event loop: chat templates, tokenizing,
detokenizing, in a small pool of threads bounded per tenant.

Why threads and `encode_batch`: a 4 MB prompt took 12-15 s of template and tokenizer
work on the event loop, and every other tenant's request waited for it. `tokenizers`'
`encode` holds the interpreter lock for its whole run, so a thread alone would not
help (measured: a 760 KB text, 3.2 s in `encode` on a thread, the loop stalled 3.15 s;
in `encode_batch` the lock is released and the loop's worst gap was 0.17 s on a loaded
2-core machine); `engine/text/tokenizer.py` encodes through `encode_batch`. A chat
template is Python, which the interpreter switches away from every few milliseconds.

Fair, bounded and charged to the tenant: the workers take the tenants' queues in
turn (round robin), so one tenant's long texts wait behind everyone else's next piece
rather than ahead of it; a tenant may have at most `per_tenant` pieces waiting and the
pool `max_waiting` in all; past either the call is refused with 429 and Retry-After, a
client-facing answer, never a backend fault (no failover, nothing ejected). The wait is
the tenant's own: its request holds its concurrency lease meanwhile. Inputs are capped
before any of this (`check_context` in adapters/native_oneshot.py: a prompt longer than
the model's context by a byte bound alone is refused without tokenizing it).
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
