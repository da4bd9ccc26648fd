"""Serve an LLMEngine to asyncio code: the step loop runs in a background thread.

Every engine call happens under one lock, so requests can be added and aborted from the
event loop while the thread steps. A plain lock is not fair: the stepping thread would
re-take it before a waiter wakes, so callers announce themselves (`_waiters`) and the
thread yields the lock to them between steps. Each step's outputs go back to the loop in one
`call_soon_threadsafe` and are routed to per-request asyncio queues.

Embeddings share the engine with generation by time (`embed`): while generation has work,
an embedding call runs passes of a quarter of the step's token budget, and after each pass
waits until generation has stepped for as long as that pass took. A chat beside a large
embeddings call takes at most about twice its time alone plus one full pass (the one
running when it arrives)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

from engine.llm_engine import EngineStats, LLMEngine, TokenOutput
from engine.metrics import EngineMetrics
from engine.pooling import next_batch
from engine.sampling_params import SamplingParams

# While generation has work, an embedding pass holds at most this share of the step's
# token budget (a smaller pass is a shorter wait for the chats stepping beside it).
SHARED_PASS_DIVISOR = 4


class AsyncEngine:
    def __init__(self, engine: LLMEngine, registry=None, name: str = "engine") -> None:
        self.engine = engine
        self.metrics = EngineMetrics(registry, name) if registry is not None else None
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._waiters = 0
        # Seconds the stepping thread has spent in generation steps; notified after each
        # step and when it goes idle (embedding passes wait on it, see `embed`).
        self._step_seconds = 0.0
        self._stepped = threading.Condition()

    def _call(self, fn, *args):
        """Run an engine call from outside the stepping thread."""
        self._waiters += 1
        try:
            with self._lock:
                return fn(*args)
        finally:
            self._waiters -= 1

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="switchyard-engine", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        engine = self.engine
        while not self._stopping:
            with self._lock:
                busy = engine.has_unfinished_requests()
                if busy:
                    try:
                        began = time.perf_counter()
                        outputs = engine.step()
                        self._count_step(time.perf_counter() - began)
                        if self.metrics is not None:
                            self.metrics.observe(engine.stats())
                        self._deliver(outputs)
                    except Exception as exc:  # a dead loop would hang every stream: fail them instead
                        self._fail_all(exc)
                        continue
                else:
                    self._wakeup.clear()
            if not busy:
                self._count_step(0.0)
                self._wakeup.wait(0.5)
            elif self._waiters:
                time.sleep(0.0002)

    def _count_step(self, seconds: float) -> None:
        with self._stepped:
            self._step_seconds += seconds
            self._stepped.notify_all()

    def _generation_waits(self) -> bool:
        # Lock-free read of queue lengths (atomic under the GIL), like `stats`.
        return self.engine.has_unfinished_requests() and not self._stopping

    def _embed_pass(
        self, prompts: list[list[int]], start: int, dimensions: int | None, owed_until: float
    ) -> tuple[list[list[float]], int, float]:
        """One embedding pass from `prompts[start]`, once generation has stepped until
        `owed_until` (or has nothing to do): its vectors, where it ended, and the step
        time generation is owed for it."""
        with self._stepped:
            while self._step_seconds < owed_until and self._generation_waits():
                self._stepped.wait(0.05)
            credit = self._step_seconds
        budget = self.engine.config.max_num_batched_tokens
        if self._generation_waits():
            budget = max(1, budget // SHARED_PASS_DIVISOR)
        end = next_batch(prompts, start, budget)
        began = time.perf_counter()
        vectors = self._call(self.engine.embed_batch, prompts[start:end], dimensions)
        return vectors, end, credit + (time.perf_counter() - began)

    def _deliver(self, outputs: list[TokenOutput]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, TokenOutput]]] = {}
        for out in outputs:
            entry = self._streams.get(out.request_id)
            if entry is not None:
                by_loop.setdefault(entry[0], []).append((entry[1], out))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:
                pass  # that event loop is closed; its consumers are gone

    def _fail_all(self, exc: BaseException) -> None:
        for request_id, (loop, queue) in list(self._streams.items()):
            self.engine.abort_request(request_id)
            try:
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            except RuntimeError:
                pass

    async def generate(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, priority: int = 0
    ) -> AsyncIterator[TokenOutput]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def add() -> None:
            if request_id in self._streams:
                raise ValueError(f"request id {request_id!r} is already streaming")
            self.engine.add_request(request_id, prompt_token_ids, params, priority)
            self._streams[request_id] = (loop, queue)

        self._call(add)
        self._ensure_thread()
        self._wakeup.set()
        remaining = params.n
        try:
            while remaining:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item.finished:
                    remaining -= 1
                yield item
        finally:

            def close() -> None:
                self._streams.pop(request_id, None)
                if remaining:
                    self.engine.abort_request(request_id)

            self._call(close)

    async def embed(self, prompts: list[list[int]], dimensions: int | None = None) -> list[list[float]]:
        """The prompts' embeddings (engine/pooling.py), in passes that share the engine with
        generation by time (the module docstring); cancelling stops it before its next
        pass (the one running finishes unseen)."""
        self.engine.check_embedding_inputs(prompts, dimensions)
        vectors: list[list[float]] = []
        start, owed_until = 0, 0.0
        while start < len(prompts):
            done, start, owed_until = await asyncio.to_thread(self._embed_pass, prompts, start, dimensions, owed_until)
            vectors += done
        return vectors

    def abort(self, request_id: str) -> None:
        """Stop a request from outside its consumer; its stream ends with finish_reason "abort"."""

        def abort() -> tuple[list[int], tuple | None]:
            req = self.engine.requests.get(request_id)
            indices: list[int] = []
            if req is not None:
                # Choices not forked yet have no Sequence; close them too.
                indices = [s.index for s in req.seqs if not s.is_finished] + list(range(len(req.seqs), req.params.n))
            self.engine.abort_request(request_id)
            return indices, self._streams.get(request_id)

        indices, entry = self._call(abort)
        if entry is None:
            return
        loop, queue = entry
        outs = [TokenOutput(request_id, i, [], None, True, "abort", 0, 0) for i in indices]
        try:
            loop.call_soon_threadsafe(_put_all, [(queue, o) for o in outs])
        except RuntimeError:
            pass

    def stats(self) -> EngineStats:
        # Lock-free on purpose: it only reads counters and lengths (atomic under the GIL),
        # so a metrics scrape never waits behind a long prefill step.
        return self.engine.stats()

    async def shutdown(self) -> None:
        self._stopping = True
        self._wakeup.set()
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, 5.0)
        self._thread = None
        self._stopping = False

        def abort_all() -> None:
            for request_id in list(self.engine.requests):
                self.engine.abort_request(request_id)

        self._call(abort_all)


def _put_all(items: list[tuple[asyncio.Queue, TokenOutput]]) -> None:
    for queue, out in items:
        queue.put_nowait(out)
