"""One admitted request, run as an ASGI response: dispatch, encode, send.

Running the generation inside the response (rather than before returning it)
lets one watcher see the client leave in every phase: while waiting for the
upstream's first event, between stream chunks, and during a non-streamed
answer. When the client leaves, the generation task is cancelled, which closes
the adapter's iterator (aborting the upstream work), and the ticket is released
with the partial usage and the phase it happened in.

The events come from `Dispatcher.open` under the stream guard, so every choice
finished, or an error event ended the stream; nothing here checks the stream again.

What the client reads is the answer format's (gateway/openai/answer_format.py): chat
and legacy completions by default, the Responses API's when its route passes
one; everything else on this path is the same for every API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import orjson

from adapters.base import (
    SAMPLING_PARAMETERS,
    ErrorEvent,
    Event,
    Finish,
    GenerationRequest,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from adapters.errors import GatewayError
from gateway.http.deadline import deadline_exceeded
from gateway.http.envelope import error_response
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.recorder import RequestRecorder
from gateway.openai.answer_format import AnswerFormat, ChatAnswer
from gateway.openai.requests import estimate_prompt_tokens
from gateway.protection.gate import Ticket
from gateway.serving.dispatch import Dispatched, Dispatcher
from gateway.serving.phases import CancelPhase

log = logging.getLogger("switchyard.gateway")

CONTENT_EVENTS = (TextDelta, ToolCallDelta)
WATCH_AFTER_S = 0.02
DROPPED_PARAMS_HEADER = "x-switchyard-dropped-params"


class Generation:
    """An ASGI response that runs the generation it answers."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        recorder: RequestRecorder,
        ctx: RequestContext,
        ticket: Ticket,
        requests: list[GenerationRequest],
        answer: AnswerFormat | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.recorder = recorder
        self.ctx = ctx
        self.ticket = ticket
        self.requests = requests
        self.first = requests[0]
        ctx.stream = self.first.stream
        self.model = self.first.model
        self.n = sum(r.sampling.n for r in requests)
        self.created = int(time.time())
        if answer is None:
            pool = dispatcher.pool(self.model)
            answer = ChatAnswer(self.first, self.created, self.n, ctx.chat, pool.fingerprint if pool else None)
        self.answer: AnswerFormat = answer
        self.response_id = ctx.response_id = self.answer.response_id
        # Where a client leaving would find the request: before the first event.
        self.waiting_phase = CancelPhase.UPSTREAM_HEADERS if self.first.stream else CancelPhase.NON_STREAMING
        self.phase = self.waiting_phase
        self.completion_tokens_seen = 0
        self.usage: Usage | None = None
        self.backend: str | None = None
        self.status = 200
        self.error: str | None = None
        self.code: str | None = None
        self.started = False  # http.response.start was sent
        self._last_content: float | None = None
        self._backoff_since: float | None = None
        self.dropped_params: tuple[str, ...] = ()
        self.ended = False  # the answer's last message is being sent: nothing may follow it
        self._watch_now: Callable[[], None] = lambda: None  # set by __call__

    def _extra_headers(self) -> dict[str, str]:
        headers = {k: str(v) for k, v in self.ticket.headers.items()}
        if self.dropped_params:
            headers[DROPPED_PARAMS_HEADER] = ",".join(self.dropped_params)
        return headers

    def _headers(self, content_type: bytes) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", content_type), (b"x-request-id", self.ctx.request_id.encode())]
        for k, v in self._extra_headers().items():
            headers.append((k.encode(), v.encode()))
        return headers

    def _dropped(self, backends: str) -> tuple[str, ...]:
        """The parameters the serving backends' runtimes dropped, as the model's
        `unsupported_params: drop` told them (the same table they dropped them by)."""
        if self.first.unsupported_params != "drop":
            return ()
        names: set[str] = set()
        for name in backends.split(","):
            backend = self.dispatcher.backends.backends.get(name)
            if backend is not None:
                names.update(backend.adapter.parameters.unsupported(self.first.sampling))
        return tuple(p for p in SAMPLING_PARAMETERS if p in names)

    async def __call__(self, scope, receive, send) -> None:
        task = asyncio.current_task()
        state = {"done": False, "gone": False}

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not state["done"]:
                        state["gone"] = True
                        task.cancel()  # type: ignore[union-attr]
                    return

        watchers: list[asyncio.Task] = []

        def start_watching() -> None:
            if not state["done"] and not watchers:
                timer.cancel()
                watchers.append(asyncio.create_task(watch()))

        # Most answers are over before a client could notice a delay; the watcher
        # task (the only per-request task) starts only once a request has lasted
        # WATCH_AFTER_S, so a disconnect is seen at most that much later. A stream
        # starts it when its answer starts, whatever the clock says: a stream lasts,
        # and a timer alone is not enough (a loop asleep in its poll wakes for the
        # client's close, and a timer due just after it waits for the next I/O,
        # seconds later on a machine whose wakeups lag, as this project's CI
        # machines' do while a CPU runtime works: docs/vllm-cpu.md).
        timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start_watching)
        self._watch_now = start_watching
        cancelled_phase: CancelPhase | None = None
        clean = False
        try:
            await self._run_by_deadline(send)
            clean = True
        except asyncio.CancelledError:
            if not state["gone"]:
                raise  # the server is shutting down, not the client leaving
            task.uncancel()  # type: ignore[union-attr]
            cancelled_phase = self.phase
            self.status = 499
            self.error = "client disconnected"
        except Exception:
            # A bug, not the client: the access log says 500, and so does the client
            # when nothing was sent yet (else the connection is cut mid-answer).
            log.exception("generation failed")
            err = GatewayError(500, "The gateway hit an internal error; it has been logged.", code="internal_error")
            if self.started:
                self.status, self.error = 500, err.message
                raise
            await self._send_error(send, err)
        finally:
            state["done"] = True
            timer.cancel()
            for w in watchers:
                w.cancel()
            usage = self.usage or self._estimated_usage()
            release = self.ticket.release(usage, cancelled_phase)
            await (release if clean else asyncio.shield(release))
            outcome = Outcome(
                self.status, usage, self.backend, self.error, cancelled_phase, self.dropped_params, self.code
            )
            self.recorder.finish(self.ctx, outcome)

    def _estimated_usage(self) -> Usage | None:
        """When the runtime gave no usage (cut stream, cancelled): what we saw."""
        if self.backend is None and self.completion_tokens_seen == 0:
            return None
        prompt = sum(estimate_prompt_tokens(r) for r in self.requests)
        return Usage(prompt, self.completion_tokens_seen)

    def _on_backoff(self, waiting: bool) -> None:
        self.phase = CancelPhase.RETRY_BACKOFF if waiting else self.waiting_phase
        if waiting:
            self._backoff_since = time.perf_counter()
        else:
            self._end_backoff()

    def _end_backoff(self) -> None:
        if self._backoff_since is not None:
            self.ctx.backoff_wait += time.perf_counter() - self._backoff_since
            self._backoff_since = None

    async def _open(self) -> Dispatched:
        """The dispatcher's start, timed: it awaits each tried backend's first event
        (upstream time, like every later event) and any retry backoff (neither is
        the gateway's own cost)."""
        started = time.perf_counter()
        backoff_before = self.ctx.backoff_wait
        try:
            return await self.dispatcher.open(self.model, self.requests, self._on_backoff)
        finally:
            self._end_backoff()  # a backoff the client left in still counts as one
            backoff = self.ctx.backoff_wait - backoff_before
            self.ctx.upstream_wait += time.perf_counter() - started - backoff

    async def _send_error(self, send, err: GatewayError) -> None:
        self.status, self.error, self.code = err.status, err.message, err.code
        resp = error_response(err, self.ctx.request_id)
        for k, v in self._extra_headers().items():
            resp.headers[k] = v
        self.started = self.ended = True  # the error response is the whole answer
        await send({"type": "http.response.start", "status": resp.status_code, "headers": resp.raw_headers})
        await send({"type": "http.response.body", "body": resp.body})

    async def _next(self, events: AsyncIterator[Event]) -> Event:
        t = time.perf_counter()
        try:
            return await events.__anext__()
        finally:
            self.ctx.upstream_wait += time.perf_counter() - t

    async def _seen(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """The upstream's events, each timed as upstream wait and counted (tokens,
        usage, status) before the answer format gets it."""
        while True:
            try:
                event = await self._next(events)
            except StopAsyncIteration:
                return
            self._saw(event)
            yield event

    def _saw(self, event: Event) -> None:
        if isinstance(event, CONTENT_EVENTS):
            self.completion_tokens_seen += 1
            now = time.perf_counter()
            if self.ctx.ttft is None:
                self.ctx.ttft = now - self.ctx.started
                self.recorder.first_token(self.model, self.backend or "-", self.ctx.ttft)
                self.ctx.trace.first_token(self.ctx.ttft)
            elif self._last_content is not None:
                self.recorder.inter_token(self.model, now - self._last_content)
            self._last_content = now
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            self.ctx.trace.finish_reason(event.reason)
        elif isinstance(event, ErrorEvent):
            self.status, self.error, self.code = event.error.status, event.error.message, event.error.code

    async def _run_by_deadline(self, send) -> None:
        """The generation, cancelled at the deadline its client set (the upstream work
        is aborted as when the client leaves): 504 before the answer started, an error
        event in a stream already going."""
        deadline = self.first.deadline
        if deadline is None:
            await self._run(send)
            return
        scope = asyncio.timeout_at(deadline)  # the event loop's clock is time.monotonic()
        try:
            async with scope:
                await self._run(send)
        except TimeoutError:
            if not scope.expired():
                raise
            err = deadline_exceeded()
            if not self.started:
                await self._send_error(send, err)
            elif not self.ended:
                # The answer format ends its stream on an error as it would on a runtime's.
                self.status, self.error, self.code = err.status, err.message, err.code
                frames = self.answer.stream_feed(ErrorEvent(err)) + await self.answer.stream_end(None)
                await send({"type": "http.response.body", "body": frames, "more_body": False})

    async def _run(self, send) -> None:
        gauge = self.recorder.inflight(self.model)
        gauge.inc()
        try:
            try:
                dispatched = await self._open()
            except GatewayError as err:
                await self._send_error(send, err)
                return
            self.backend = dispatched.backend
            self.dropped_params = self._dropped(dispatched.backend)
            try:
                if self.first.stream:
                    await self._stream(dispatched.events, send)
                else:
                    await self._whole(dispatched.events, send)
            finally:
                await dispatched.aclose()
        finally:
            gauge.dec()

    async def _stream(self, events: AsyncIterator[Event], send) -> None:
        self.phase = CancelPhase.MID_STREAM
        self.started = True
        self._watch_now()
        answer = self.answer
        # The answer's opening frames go out with the first event's (already read by the
        # dispatcher, so nothing waits for it): one write fewer per stream.
        opening = answer.stream_start()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": self._headers(b"text/event-stream") + [(b"cache-control", b"no-cache")],
            }
        )
        body = {"type": "http.response.body", "body": b"", "more_body": True}
        async for event in self._seen(events):
            frames = answer.stream_feed(event)
            if opening:
                frames, opening = opening + frames, b""
            if frames:
                body["body"] = frames
                await send(body)
        ending = await answer.stream_end(self.usage or self._estimated_usage())
        self.ended = True
        await send({"type": "http.response.body", "body": opening + ending, "more_body": False})

    async def _whole(self, events: AsyncIterator[Event], send) -> None:
        answer = self.answer
        # The timer that starts the disconnect watcher can fire seconds late on a
        # machine whose wakeups lag (see __call__), while the upstream's events keep
        # the loop awake: a whole answer also starts watching at its first event
        # after WATCH_AFTER_S, so a long one notices its client leaving in time.
        watch_at = self.ctx.started + WATCH_AFTER_S
        watching = False
        try:
            async for event in self._seen(events):
                answer.whole_feed(event)
                if not watching and time.perf_counter() >= watch_at:
                    watching = True
                    self._watch_now()
            usage = self.usage or self._estimated_usage() or Usage(0, 0)
            payload = orjson.dumps(await answer.whole_body(usage))
        except GatewayError as err:
            await self._send_error(send, err)
            return
        # The whole answer goes out now: a deadline striking while the client reads
        # it (a slow reader) must add nothing after it.
        self.started = self.ended = True
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": self._headers(b"application/json") + [(b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload})
