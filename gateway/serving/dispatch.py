"""From validated requests to one stream of canonical events: the model's routing
order (capability filter first), failover and fallback only before the first byte
(a backend that timed out is not tried again in a later round), the outlier
detector's outcomes and `Blame`, the retry budget, n > 1 fan-out and batched
prompts started together, each backend's in-flight count (one unit per generation,
held until `Dispatched.aclose`) and prefill backlog (released on every way the
wait for the first event ends), an upstream id of the gateway's own per attempt,
and a model's rollout track. The stream goes out under its `StreamGuard`.
docs/architecture.md ("A request's way through", "Routing", "Rollouts on the
request path") states each rule and why.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.base import ErrorEvent, Event, GenerationRequest, total_choices
from adapters.errors import FailureKind, GatewayError, model_not_found, no_backend, upstream_failed
from gateway.backends.backend_set import Backend, BackendSet, ModelPool
from gateway.observe.context import NO_ATTEMPT, Attempt, current_trace
from gateway.serving.answer_check import AnswerCheck
from gateway.serving.merge import Merged, Sink, SubStream
from gateway.serving.rollout import RolloutRequest
from gateway.serving.stream_guard import StreamGuard, guarded
from policies.ejection import REQUEST_CAUSABLE
from policies.rollout_assign import assign
from policies.rollout_records import RolloutSink, Track

log = logging.getLogger("switchyard.dispatch")


# Told True when a retry round starts waiting out its backoff, False when it ends.
BackoffListener = Callable[[bool], None]
# Told the backend's name and the error of every attempt that failed before its first event.
FailureListener = Callable[[str, GatewayError], None]


def check_choices(requests: list[GenerationRequest], limit: int) -> None:
    """400 when the prompts of one request, n choices each, would start more than
    `limit` upstream generations (`limits.max_choices_per_request`)."""
    total = total_choices(requests)
    if total <= limit:
        return
    prompts = len(requests)
    raise GatewayError(
        400,
        f"This request asks for {total} completions ({prompts} prompt(s), n={requests[0].sampling.n} each); "
        f"this gateway allows at most {limit} per request.",
        param="prompt" if prompts > limit else "n",
        code="too_many_choices",
    )


@dataclass
class Dispatched:
    """A request under way: who serves it, and its guarded events. `aclose` ends it
    (closing the upstream work and freeing each backend's in-flight slots), whether
    or not its events were read."""

    backends: tuple[str, ...]  # the serving backends' names, sorted (several when sub-requests went apart)
    events: AsyncIterator[Event]
    holds: Started | Merged

    @property
    def label(self) -> str:
        """The backends as one metric label and log word."""
        return ",".join(self.backends)

    async def aclose(self) -> None:
        await self.events.aclose()  # type: ignore[attr-defined]
        await self.holds.aclose()


class Started(SubStream):
    """A started sub-request: the adapter's iterator, its first event (already
    read) and `units` in-flight slots of its backend (one per choice it makes),
    held until `aclose`, which also closes the iterator (aborting the upstream
    work) and ends the attempt's span, whether it was read or not."""

    def __init__(
        self,
        backend: Backend,
        agen: AsyncIterator[Event],
        first: Event,
        offset: int,
        units: int,
        attempt: Attempt = NO_ATTEMPT,
    ) -> None:
        super().__init__(offset, agen, first)
        self.backend = backend
        self.units = units
        self.attempt = attempt

    async def aclose(self) -> None:
        if not self.closed:
            self.backend.inflight -= self.units
        try:
            await super().aclose()
        finally:
            self.attempt.end()


class Dispatcher:
    """`rollouts`: where the shares of a model under rollout are read (None: no rollout runs)."""

    def __init__(
        self, backends: BackendSet, on_failure: FailureListener | None = None, rollouts: RolloutSink | None = None
    ) -> None:
        self.backends = backends
        self.on_failure = on_failure
        self.rollouts = rollouts

    def pool(self, model: str) -> ModelPool | None:
        return self.backends.pools.get(model)

    def assign(self, model: str, requests: list[GenerationRequest]) -> RolloutRequest | None:
        """A model under rollout: the request's track, once (every prompt and every retry
        round on it), from the sink's shares now (None: the model has no rollout)."""
        pool = self.backends.pools.get(model)
        rollout = pool.config.rollout if pool is not None else None
        if pool is None or rollout is None or self.rollouts is None:
            return None
        shares = self.rollouts.shares(model)
        track = assign(model, requests[0], shares, rollout.sticky, pool.config.session_affinity.sources)
        return RolloutRequest(track, track, shares, AnswerCheck(requests[0]))

    async def open(
        self,
        model: str,
        requests: list[GenerationRequest],
        on_backoff: BackoffListener | None = None,
        rollout: RolloutRequest | None = None,
    ) -> Dispatched:
        """Start every sub-request; returns the backend name(s) and the merged,
        guarded events. Raises GatewayError when nothing could start; the client
        has seen nothing then. `rollout` (from `assign`): the track to route on; it
        is told the track of the backend that started."""
        pool = self.backends.pools.get(model)
        if pool is None:
            raise model_not_found(model)  # a reload removed it since admission
        alone = len(requests) == 1
        sink: Sink | None = None if alone and requests[0].sampling.n == 1 else asyncio.Queue()
        track = rollout.assigned if rollout is not None else None
        if alone:
            starts = await self._start(pool, requests[0], 0, sink, alone, on_backoff, track)
        else:
            starters = []
            offset = 0
            for req in requests:
                starters.append(self._start(pool, req, offset, sink, alone, on_backoff, track))
                offset += req.sampling.n
            starts = await _together(starters)
        names = (starts[0].backend.name,) if len(starts) == 1 else tuple(sorted({s.backend.name for s in starts}))
        if rollout is not None and any(b is starts[0].backend for b in pool.backends):
            rollout.served = starts[0].backend.config.track
        guard = StreamGuard.for_requests(requests, ",".join(names))
        if sink is None or (len(starts) == 1 and not starts[0].forwarding):
            # One stream: the guard reads the adapter's iterator itself (no layer between).
            (started,) = starts
            return Dispatched(names, guarded(started.agen, guard, started.first), started)
        merged = Merged(starts, sink, prompt_counted_once=alone)
        return Dispatched(names, guarded(merged, guard), merged)

    async def _start(
        self,
        pool: ModelPool,
        req: GenerationRequest,
        offset: int,
        sink: Sink | None,
        alone: bool,
        on_backoff: BackoffListener | None,
        track: Track | None = None,
    ) -> list[Started]:
        """One sub-request started on the first backend that answers, through the
        model's retry rounds and fallback models; whose fault each failure was is
        settled at the end (`Blame`)."""
        pools = [pool]
        if pool.config.fallback:
            pools += [self.backends.pools[f] for f in pool.config.fallback if f in self.backends.pools]
        budget = pool.retry_budget
        budget.record_request()
        blame = Blame(req.tenant or "")
        try:
            last_error: GatewayError | None = None
            timed_out: set[str] = set()
            attempt = 0
            for round_ in range(pool.config.max_retries + 1):
                if round_:
                    if last_error is not None and budget.exhausted():
                        raise last_error  # the pool is failing: no backoff, no more rounds
                    if on_backoff:
                        on_backoff(True)
                    await asyncio.sleep(pool.config.retry_backoff_s * (2 ** (round_ - 1)))
                    if on_backoff:
                        on_backoff(False)
                for p in pools:
                    # The track is the requested model's; a fallback model under rollout serves from its stable.
                    on = track if p is pool else ("stable" if p.config.rollout is not None else None)
                    candidates, why_not = self._candidates(p, req, on)
                    if not candidates and why_not and p is pool and len(pools) == 1:
                        raise why_not
                    for backend, held_out, prefill in candidates:
                        if backend.name in timed_out:
                            continue
                        # Routing saw the circuit as it stood; asking now takes the half-open
                        # probe for this request, or learns another request took it. A backend
                        # routing kept although ejected (nothing else left) is tried anyway.
                        if not held_out and p.ejection.is_ejected(backend.name):
                            continue
                        if attempt and not budget.may_retry():
                            log.warning("model %s: retry budget spent, answering the last error", pool.name)
                            raise last_error or why_not or no_backend(pool.name)
                        # A retry is another upstream generation: it gets an id of its own.
                        attempt_req = (
                            dataclasses.replace(req, request_id=f"{req.request_id}.{attempt}") if attempt else req
                        )
                        attempt += 1
                        try:
                            started = await self._start_on(backend, attempt_req, offset, sink, alone, prefill)
                        except GatewayError as exc:
                            if self.on_failure is not None:
                                self.on_failure(backend.name, exc)
                            if not exc.fails_over or exc.failure is None:
                                blame.answered(p, backend.name)  # the backend answered: the fault is the request's
                                raise
                            if blame.failed(p, backend.name, exc.failure):
                                budget.give_back()
                                raise  # it followed the request: no backend is to blame, none is tried further
                            if exc.failure is FailureKind.TIMEOUT:
                                timed_out.add(backend.name)
                            log.warning("backend %s failed before the first event: %s", backend.name, exc.message)
                            last_error = exc
                        else:
                            blame.answered(p, backend.name)
                            return started
                    if why_not and last_error is None:
                        last_error = why_not
            raise last_error or no_backend(pool.name)
        finally:
            blame.settle()

    def _candidates(
        self, pool: ModelPool, req: GenerationRequest, track: Track | None = None
    ) -> tuple[list[tuple[Backend, bool, int]], GatewayError | None]:
        """The backends to try in order (of `track`, under a rollout), each with whether
        routing kept it although ejected and the prompt tokens it would compute for the request."""
        with current_trace().step("switchyard.route") as step:
            routed = pool.route(req, track)
            step.set("switchyard.route.candidates", len(routed.candidates))
        if routed.unsupported:
            # What the runtimes lack, never which backends (their names stay in the config).
            gaps = dict.fromkeys(f"{gap.adapter} does not support {gap.feature}" for gap in routed.refused)
            return [], GatewayError(
                400, f"This request cannot be served: {'; '.join(gaps)}.", code="unsupported_by_runtime"
            )
        by_name = pool.by_name
        return [(by_name[v.name], v.ejected, v.prefill_tokens or 0) for v in routed.candidates], None

    def _start_on(
        self, backend: Backend, req: GenerationRequest, offset: int, sink: Sink | None, alone: bool, prefill: int
    ) -> Awaitable[list[Started]]:
        """The start on `backend`, to be awaited (a plain function: one coroutine frame
        fewer on the way to the first event)."""
        n = req.sampling.n
        if n > 1 and not backend.adapter.capabilities.n:
            # Fan out: n single requests, all at once; seeds stay reproducible and differ per choice.
            subs = []
            for i in range(n):
                s = dataclasses.replace(
                    req.sampling, n=1, seed=None if req.sampling.seed is None else req.sampling.seed + i
                )
                sub = dataclasses.replace(req, sampling=s, request_id=f"{req.request_id}-{i}")
                subs.append(self._start_one(backend, sub, offset + i, sink, prefill))
            return _together(subs)
        return self._start_one(backend, req, offset, None if alone else sink, prefill)

    async def _start_one(
        self, backend: Backend, req: GenerationRequest, offset: int, sink: Sink | None, prefill: int
    ) -> list[Started]:
        units = req.sampling.n
        backend.inflight += units
        attempt = current_trace().attempt(backend, req)
        agen = backend.adapter.generate(attempt.stamp(req))
        # The prompt is on the backend's backlog while the first event is awaited:
        # however the wait ends (the event, an error, a cancellation), it comes off.
        backend.backlog += prefill
        try:
            try:
                first = await agen.__anext__()
            finally:
                backend.backlog -= prefill
        except StopAsyncIteration:
            first = ErrorEvent(upstream_failed(backend.name, "it ended its answer before sending anything"))
        except BaseException as exc:
            backend.inflight -= units
            await agen.aclose()  # type: ignore[attr-defined]
            attempt.end(exc)
            raise
        if isinstance(first, ErrorEvent):
            # Nothing reached the client yet: answer with the error's own status
            # (or fail over when it is the backend's failure) instead of a 200 stream.
            backend.inflight -= units
            await agen.aclose()  # type: ignore[attr-defined]
            attempt.end(first.error)
            raise first.error
        started = Started(backend, agen, first, offset, units, attempt)
        if sink is not None:
            started.forward(sink)
        return [started]


def record_outcome(pool: ModelPool, backend: str, failure: FailureKind | None, tenant: str = "") -> None:
    """One attempt's outcome into the pool's outlier detector; a change of circuit is logged."""
    ejection = pool.ejection
    if failure is None:
        change = ejection.record_success(backend, tenant=tenant)
    else:
        change = ejection.record_failure(backend, failure, tenant=tenant)
    if change is not None:
        log.warning("model %s: %s", pool.name, change.describe())


class Blame:
    """Whose fault one request's failed attempts were, told to the outlier detector.

    A failure the request could have caused (`REQUEST_CAUSABLE`) is held until the
    next attempt says whose it was: another backend answering makes it the first
    backend's (recorded then); the same failure on another backend makes both the
    request's (`failed` answers True: record nothing, try no further). Whatever is
    still held when the request ends (no other backend was tried) is recorded."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.held: tuple[ModelPool, str, FailureKind] | None = None

    def answered(self, pool: ModelPool, backend: str) -> None:
        """The backend answered (a first event, or a client mistake it refused)."""
        self.settle()
        record_outcome(pool, backend, None, self.tenant)

    def failed(self, pool: ModelPool, backend: str, kind: FailureKind) -> bool:
        """One attempt failed before its first event; True when the failure is the request's."""
        held, self.held = self.held, None
        if kind in REQUEST_CAUSABLE and held is not None and held[1] != backend and held[2] in REQUEST_CAUSABLE:
            return True
        if held is not None:
            record_outcome(*held, self.tenant)
        if kind in REQUEST_CAUSABLE:
            self.held = (pool, backend, kind)
        else:
            record_outcome(pool, backend, kind, self.tenant)
        return False

    def settle(self) -> None:
        if self.held is not None:
            held, self.held = self.held, None
            record_outcome(*held, self.tenant)


async def _together(starters: list[Coroutine[Any, Any, list[Started]]]) -> list[Started]:
    """Run the starters (two or more: several prompts, or n fanned out) at once; every
    sub-request they started, in their order. When one fails, or this is cancelled (the
    client left), the others are cancelled and whatever did start is closed before the
    error is raised."""
    tasks = [asyncio.ensure_future(s) for s in starters]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        await _unwind(tasks)
        raise
    failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None), None)
    if failed is None:
        return [s for t in tasks for s in t.result()]
    await _unwind(tasks)
    raise failed.exception()  # type: ignore[misc]


async def _unwind(tasks: Sequence[asyncio.Future[list[Started]]]) -> None:
    for t in tasks:
        t.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    started = [s for r in results if isinstance(r, list) for s in r]
    await asyncio.gather(*(s.aclose() for s in started), return_exceptions=True)
