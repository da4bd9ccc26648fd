"""From validated requests to one stream of canonical events.

- Picks backends through the model's routing policy, skipping backends whose
  runtime lacks a capability the request needs (400 naming the runtime if none
  can serve it).
- Fails over, and falls back to the model's `fallback` models, only while
  nothing has reached the client: a backend counts as started once its first
  event arrived.
- Emulates n > 1 for runtimes without it by fanning out n single requests, and
  merges the prompts of a batched legacy completion into one stream with dense
  choice indices.
- Holds each backend's in-flight count for exactly as long as its stream is open.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from adapters.base import ErrorEvent, Event, GenerationRequest, Usage
from adapters.errors import GatewayError
from gateway.backends import Backend, BackendSet, ModelPool

log = logging.getLogger("switchyard.dispatch")

_END = object()


@dataclass
class Started:
    backend: Backend
    events: AsyncIterator[Event]


class Dispatcher:
    def __init__(self, backends: BackendSet) -> None:
        self.backends = backends

    def pool(self, model: str) -> ModelPool | None:
        return self.backends.pools.get(model)

    async def open(
        self, model: str, requests: list[GenerationRequest], on_phase: Callable[[str], None] | None = None
    ) -> tuple[str, AsyncIterator[Event]]:
        """Start every sub-request; returns the backend name(s) and the merged events.

        `on_phase` hears "retry_backoff" while a retry round waits and "upstream"
        when it ends. Raises GatewayError when nothing could start; the client
        has seen nothing then."""
        offset = 0
        plan = []
        for req in requests:
            plan.append((offset, req))
            offset += req.sampling.n
        starts: list[tuple[int, Started]] = []
        try:
            for off, req in plan:
                for sub_off, started in await self._start(model, req, on_phase):
                    starts.append((off + sub_off, started))
        except BaseException:
            await asyncio.gather(*(s.events.aclose() for _, s in starts), return_exceptions=True)
            raise
        names = ",".join(sorted({s.backend.name for _, s in starts}))
        if len(starts) == 1 and starts[0][0] == 0:
            return names, starts[0][1].events
        subs = [(off, s.events) for off, s in starts]
        same_prompt = len(requests) == 1
        return names, merge(subs, prompt_counted_once=same_prompt)

    async def _start(
        self, model: str, req: GenerationRequest, on_phase: Callable[[str], None] | None
    ) -> list[tuple[int, Started]]:
        pool = self.pool(model)
        if pool is None:
            raise GatewayError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
        pools = [pool] + [self.backends.pools[f] for f in pool.config.fallback if f in self.backends.pools]
        last_error: GatewayError | None = None
        rounds = pool.config.max_retries + 1
        for attempt in range(rounds):
            if attempt:
                if on_phase:
                    on_phase("retry_backoff")
                await asyncio.sleep(pool.config.retry_backoff_s * (2 ** (attempt - 1)))
                if on_phase:
                    on_phase("upstream")
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
                await asyncio.gather(*(s.events.aclose() for _, s in started), return_exceptions=True)
                raise
            return started
        return [(0, await self._start_one(backend, req))]

    async def _start_one(self, backend: Backend, req: GenerationRequest) -> Started:
        backend.inflight += 1
        agen = backend.adapter.generate(req)
        try:
            first = await agen.__anext__()
        except StopAsyncIteration:
            first = None
        except BaseException:
            backend.inflight -= 1
            await agen.aclose()
            raise
        if isinstance(first, ErrorEvent):
            # Nothing reached the client yet: answer with the error's own status
            # (or fail over when it is retryable) instead of a 200 stream.
            backend.inflight -= 1
            await agen.aclose()
            raise first.error
        return Started(backend, _tracked(backend, agen, first))


async def _tracked(backend: Backend, agen: AsyncIterator[Event], first: Event | None) -> AsyncIterator[Event]:
    try:
        if first is not None:
            yield first
        async for event in agen:
            yield event
    except GatewayError as exc:
        yield ErrorEvent(exc)
    finally:
        backend.inflight -= 1
        await agen.aclose()  # type: ignore[attr-defined]


async def merge(subs: list[tuple[int, AsyncIterator[Event]]], prompt_counted_once: bool) -> AsyncIterator[Event]:
    """Interleave several event streams, shifting each one's choice indices by its
    offset and summing usage into one `Usage` at the end."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(offset: int, events: AsyncIterator[Event]) -> None:
        try:
            async for ev in events:
                await queue.put((offset, ev))
        except GatewayError as exc:
            await queue.put((offset, ErrorEvent(exc)))
        finally:
            await queue.put((offset, _END))

    tasks = [asyncio.create_task(pump(off, ev)) for off, ev in subs]
    prompt = completion = 0
    cached: int | None = None
    saw_usage = False
    try:
        remaining = len(tasks)
        while remaining:
            offset, ev = await queue.get()
            if ev is _END:
                remaining -= 1
                continue
            if isinstance(ev, ErrorEvent):
                yield ev
                return
            if isinstance(ev, Usage):
                saw_usage = True
                prompt = max(prompt, ev.prompt_tokens) if prompt_counted_once else prompt + ev.prompt_tokens
                completion += ev.completion_tokens
                if ev.cached_tokens is not None:
                    cached = (
                        max(cached or 0, ev.cached_tokens) if prompt_counted_once else (cached or 0) + ev.cached_tokens
                    )
                continue
            yield dataclasses.replace(ev, index=ev.index + offset)  # type: ignore[type-var]
        if saw_usage:
            yield Usage(prompt, completion, cached)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(ev.aclose() for _, ev in subs), return_exceptions=True)  # type: ignore[attr-defined]
