"""From validated requests to one stream of canonical events.

- Picks backends through the model's routing policy, skipping backends whose
  runtime lacks a capability the request needs (400 naming the runtime if none
  can serve it).
- Fails over, and falls back to the model's `fallback` models, only while
  nothing has reached the client: a backend counts as started once its first
  event arrived (a stream that ends before any event never started: 502).
- Emulates n > 1 for runtimes without it by fanning out n single requests, and
  merges the prompts of a batched legacy completion into one stream with dense
  choice indices and one usage.
- Holds each backend's in-flight count from the start until the request is closed
  (`Dispatched.aclose`), whether its events were read or not.
- Hands back the stream under its `StreamGuard`, the one owner of the stream rules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from adapters.base import ErrorEvent, Event, GenerationRequest
from adapters.errors import GatewayError, upstream_failed
from gateway.backends import Backend, BackendSet, ModelPool
from gateway.merge import Merged, merge
from gateway.stream_guard import StreamGuard, guarded

log = logging.getLogger("switchyard.dispatch")


# Told True when a retry round starts waiting out its backoff, False when it ends.
BackoffListener = Callable[[bool], None]


@dataclass
class Dispatched:
    """A request under way: who serves it, and its guarded events. `aclose` ends it
    (closing the upstream work and freeing each backend's in-flight slot), whether
    or not its events were read."""

    backend: str  # the backend's name; several, comma-separated, when sub-requests went apart
    events: AsyncIterator[Event]
    holds: Started | Merged

    async def aclose(self) -> None:
        await self.events.aclose()  # type: ignore[attr-defined]
        await self.holds.aclose()


class Dispatcher:
    def __init__(self, backends: BackendSet) -> None:
        self.backends = backends

    def pool(self, model: str) -> ModelPool | None:
        return self.backends.pools.get(model)

    async def open(
        self, model: str, requests: list[GenerationRequest], on_backoff: BackoffListener | None = None
    ) -> Dispatched:
        """Start every sub-request; returns the backend name(s) and the merged,
        guarded events. Raises GatewayError when nothing could start; the client
        has seen nothing then."""
        offset = 0
        plan = []
        for req in requests:
            plan.append((offset, req))
            offset += req.sampling.n
        starts: list[tuple[int, Started]] = []
        try:
            for off, req in plan:
                for sub_off, started in await self._start(model, req, on_backoff):
                    starts.append((off + sub_off, started))
        except BaseException:
            await asyncio.gather(*(s.aclose() for _, s in starts), return_exceptions=True)
            raise
        names = ",".join(sorted({s.backend.name for _, s in starts}))
        guard = StreamGuard.for_requests(requests, names)
        if len(starts) == 1 and starts[0][0] == 0:
            # One stream: the guard reads the adapter's iterator itself (no layer between).
            started = starts[0][1]
            return Dispatched(names, guarded(started.agen, guard, started.first), started)
        merged = merge(list(starts), prompt_counted_once=len(requests) == 1)
        return Dispatched(names, guarded(merged, guard), merged)

    async def _start(
        self, model: str, req: GenerationRequest, on_backoff: BackoffListener | None
    ) -> list[tuple[int, Started]]:
        pool = self.pool(model)
        if pool is None:
            raise GatewayError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
        pools = [pool] + [self.backends.pools[f] for f in pool.config.fallback if f in self.backends.pools]
        last_error: GatewayError | None = None
        rounds = pool.config.max_retries + 1
        for attempt in range(rounds):
            if attempt:
                if on_backoff:
                    on_backoff(True)
                await asyncio.sleep(pool.config.retry_backoff_s * (2 ** (attempt - 1)))
                if on_backoff:
                    on_backoff(False)
            for p in pools:
                candidates, why_not = self._candidates(p, req)
                if not candidates and why_not and p is pool and len(pools) == 1:
                    raise why_not
                for backend in candidates:
                    try:
                        return await self._start_on(backend, req)
                    except GatewayError as exc:
                        if not exc.retryable:
                            raise
                        log.warning("backend %s failed before first byte: %s", backend.name, exc.message)
                        last_error = exc
                if why_not and last_error is None:
                    last_error = why_not
        raise last_error or GatewayError(
            503, f"No backend of model `{model}` could take the request.", code="no_backend_available"
        )

    def _candidates(self, pool: ModelPool, req: GenerationRequest) -> tuple[list[Backend], GatewayError | None]:
        routed = pool.route(req)
        if routed.unsupported:
            reasons = "; ".join(str(gap) for gap in routed.refused)
            return [], GatewayError(400, f"This request cannot be served: {reasons}.", code="unsupported_by_runtime")
        by_name = {b.name: b for b in pool.backends}
        return [by_name[v.name] for v in routed.candidates], None

    async def _start_on(self, backend: Backend, req: GenerationRequest) -> list[tuple[int, Started]]:
        n = req.sampling.n
        if n > 1 and not backend.adapter.capabilities.n:
            # Fan out: n single requests; seeds stay reproducible and differ per choice.
            subs = []
            for i in range(n):
                s = dataclasses.replace(
                    req.sampling, n=1, seed=None if req.sampling.seed is None else req.sampling.seed + i
                )
                subs.append(dataclasses.replace(req, sampling=s, request_id=f"{req.request_id}-{i}"))
            started: list[tuple[int, Started]] = []
            try:
                for i, sub in enumerate(subs):
                    started.append((i, await self._start_one(backend, sub)))
            except BaseException:
                await asyncio.gather(*(s.aclose() for _, s in started), return_exceptions=True)
                raise
            return started
        return [(0, await self._start_one(backend, req))]

    async def _start_one(self, backend: Backend, req: GenerationRequest) -> Started:
        backend.inflight += 1
        agen = backend.adapter.generate(req)
        try:
            first = await agen.__anext__()
        except StopAsyncIteration:
            first = ErrorEvent(upstream_failed(backend.name, "the stream ended before any event"))
        except BaseException:
            backend.inflight -= 1
            await agen.aclose()  # type: ignore[attr-defined]
            raise
        if isinstance(first, ErrorEvent):
            # Nothing reached the client yet: answer with the error's own status
            # (or fail over when it is retryable) instead of a 200 stream.
            backend.inflight -= 1
            await agen.aclose()  # type: ignore[attr-defined]
            raise first.error
        return Started(backend, agen, first)


class Started:
    """A started sub-request: the adapter's iterator, its first event (already read)
    and one in-flight slot of its backend, held until `aclose`, which also closes
    the iterator (aborting the upstream work), whether it was read or not."""

    def __init__(self, backend: Backend, agen: AsyncIterator[Event], first: Event) -> None:
        self.backend = backend
        self.agen = agen
        self.first = first
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[Event]:
        yield self.first
        async for event in self.agen:
            yield event

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.backend.inflight -= 1
        await self.agen.aclose()  # type: ignore[attr-defined]
