"""One admitted generation, run by the exchange runner (exchange.py): dispatch,
encode, send.

The events come from `Dispatcher.open` under the stream guard, so every choice
finished, or an error event ended the stream; nothing here checks the stream again.

What the client reads is the answer format's (gateway/openai/answer_format.py): chat
and legacy completions by default, the Responses API's when its route passes
one; everything else on this path is the same for every API.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from adapters.base import SAMPLING_PARAMETERS, ErrorEvent, Event, Finish, GenerationRequest, Usage, total_choices
from adapters.errors import GatewayError
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.recorder import RequestRecorder
from gateway.openai.answer_format import AnswerFormat, ChatAnswer
from gateway.protection.gate import Ticket
from gateway.serving import exchange
from gateway.serving.dispatch import Dispatcher
from gateway.serving.exchange import ExchangeRunner
from gateway.serving.mirror import Mirror
from gateway.serving.phases import CancelPhase
from gateway.serving.rollout import RolloutRequest
from gateway.serving.usage import CONTENT_EVENTS, UsageCount

DROPPED_PARAMS_HEADER = "x-switchyard-dropped-params"
# A request of a model under rollout served by the other track than the one it was
# assigned (its own had no serving backend): the header names the assigned track.
TRACK_FALLBACK_HEADER = "x-switchyard-track-fallback"


class Generation(ExchangeRunner):
    """An ASGI response that runs the generation it answers."""

    # Until set (class defaults, as ExchangeRunner's):
    _last_content: float | None = None
    _itl: Any = None  # the inter-token histogram, looked up at the first token
    _backoff_since: float | None = None
    dropped_params: tuple[str, ...] = ()
    track = ""  # the serving track of a model under rollout

    def __init__(
        self,
        dispatcher: Dispatcher,
        recorder: RequestRecorder,
        ctx: RequestContext,
        ticket: Ticket,
        requests: list[GenerationRequest],
        answer: AnswerFormat | None = None,
        mirror: Mirror | None = None,
    ) -> None:
        first = requests[0]
        # Where a client leaving would find the request: before the first event.
        self.waiting_phase = CancelPhase.UPSTREAM_HEADERS if first.stream else CancelPhase.NON_STREAMING
        super().__init__(recorder, ctx, ticket, first.deadline, self.waiting_phase)
        self.dispatcher = dispatcher
        self.requests = requests
        self.first = first
        ctx.stream = first.stream
        self.model = first.model
        self.n = total_choices(requests)
        self.created = int(time.time())
        if answer is None:
            pool = dispatcher.backends.pools.get(self.model)  # its fingerprint: OpenAI's system_fingerprint
            answer = ChatAnswer(first, self.created, self.n, first.kind == "chat", pool.fingerprint if pool else None)
        self.answer: AnswerFormat = answer
        self.response_id = ctx.response_id = self.answer.response_id
        self.counted = UsageCount(requests)
        self.mirror = mirror
        # A model under rollout: the request's track (the metrics' track label is the serving one).
        self.rollout: RolloutRequest | None = dispatcher.assign(self.model, requests)

    def _extra_headers(self) -> dict[str, str]:
        headers = super()._extra_headers()
        if self.dropped_params:
            headers[DROPPED_PARAMS_HEADER] = ",".join(self.dropped_params)
        if self.rollout is not None and self.rollout.fell_back:
            headers[TRACK_FALLBACK_HEADER] = self.rollout.assigned
        return headers

    def _answer_headers(self, content_type: bytes) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", content_type), (b"x-request-id", self.ctx.request_id.encode())]
        extra = self._extra_headers()
        if extra:
            headers += [(k.encode(), v.encode()) for k, v in extra.items()]
        return headers

    def _dropped(self, backends: tuple[str, ...]) -> tuple[str, ...]:
        """The parameters the serving backends' runtimes dropped, as the model's
        `unsupported_params: drop` told them (the same table they dropped them by)."""
        if self.first.unsupported_params != "drop":
            return ()
        names: set[str] = set()
        for name in backends:
            backend = self.dispatcher.backends.backends.get(name)
            if backend is not None:
                names.update(backend.adapter.parameters.unsupported(self.first.sampling))
        return tuple(p for p in SAMPLING_PARAMETERS if p in names)

    def _final_usage(self) -> Usage | None:
        """The runtime's usage; when it gave none (a cut stream, a client gone), what was seen."""
        if self.usage is not None:
            return self.usage
        return self.counted.usage() if self.backend is not None else None

    def _outcome(self, usage: Usage | None, cancelled: CancelPhase | None) -> Outcome:
        return Outcome(
            self.status,
            usage,
            self.backend,
            self.error,
            cancelled,
            self.dropped_params,
            self.code,
            rollout=self.rollout,
            failure=self.failure,
        )

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

    def _saw(self, event: Event, now: float) -> None:
        """An upstream event, counted (tokens, usage, status) before the answer format
        gets it; a content event's time (first token, inter-token gap) is `now`, when
        the wait for it ended."""
        ctx = self.ctx
        if isinstance(event, CONTENT_EVENTS):
            self.counted.saw(event)
            last = self._last_content
            if last is not None:
                self._itl.observe(now - last)
            else:
                if ctx.ttft is None:
                    ctx.ttft = now - ctx.started
                    self.recorder.first_token(self.model, self.backend or "-", ctx.ttft, self.track)
                    ctx.trace.first_token(ctx.ttft)
                self._itl = self.recorder.inter_token(self.model, self.track)
            self._last_content = now
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            ctx.trace.finish_reason(event.reason)
        elif isinstance(event, ErrorEvent):
            err = event.error
            self.status, self.error, self.code, self.failure = err.status, err.message, err.code, err.failure
        if self.rollout is not None:
            self.rollout.check.saw(event)

    async def _past_deadline(self, send, err: GatewayError) -> None:
        # The answer format ends its stream on an error as it would on a runtime's.
        frames = self.answer.stream_feed(ErrorEvent(err)) + await self.answer.stream_end(None)
        await send({"type": "http.response.body", "body": frames, "more_body": False})

    async def _run(self, send) -> None:
        # The dispatcher's start, timed: it awaits each tried backend's first event
        # (upstream time, like every later event) and any retry backoff (neither is
        # the gateway's own cost).
        ctx = self.ctx
        started = time.perf_counter()
        backoff_before = ctx.backoff_wait
        try:
            try:
                dispatched = await self.dispatcher.open(self.model, self.requests, self._on_backoff, self.rollout)
            finally:
                self._end_backoff()  # a backoff the client left in still counts as one
                backoff = ctx.backoff_wait - backoff_before
                ctx.upstream_wait += time.perf_counter() - started - backoff
        except GatewayError as err:
            await self._send_error(send, err)
            return
        self.backend = dispatched.label
        self.dropped_params = self._dropped(dispatched.backends)
        if self.rollout is not None:
            self.track = self.rollout.served
            if self.mirror is not None:
                self.mirror.offer(self.requests, self.rollout)
        try:
            if self.first.stream:
                await self._stream(dispatched.events, send)
            else:
                await self._whole(dispatched.events, send)
        finally:
            await dispatched.aclose()

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
                "headers": self._answer_headers(b"text/event-stream") + [(b"cache-control", b"no-cache")],
            }
        )
        body = {"type": "http.response.body", "body": b"", "more_body": True}
        # Each wait for the upstream's next event is its time, not the gateway's (timed
        # in the loop, not by a coroutine per event; `since` is 0.0 while not waiting).
        ctx, clock = self.ctx, time.perf_counter
        since = clock()
        try:
            async for event in events:
                now = clock()
                ctx.upstream_wait += now - since
                since = 0.0
                self._saw(event, now)
                frames = answer.stream_feed(event)
                if opening:
                    frames, opening = opening + frames, b""
                if frames:
                    body["body"] = frames
                    await send(body)
                since = clock()
        finally:
            if since:
                ctx.upstream_wait += clock() - since
        ending = await answer.stream_end(self._final_usage())
        self.ended = True
        await send({"type": "http.response.body", "body": opening + ending, "more_body": False})

    async def _whole(self, events: AsyncIterator[Event], send) -> None:
        answer = self.answer
        # The timer that starts the disconnect watcher can fire seconds late on a
        # machine whose wakeups lag (exchange.py), while the upstream's events keep
        # the loop awake: a whole answer also starts watching at its first event
        # after WATCH_AFTER_S, so a long one notices its client leaving in time.
        ctx, clock = self.ctx, time.perf_counter
        watch_at = ctx.started + exchange.WATCH_AFTER_S
        watching = False
        since = clock()  # as in _stream
        try:
            try:
                async for event in events:
                    now = clock()
                    ctx.upstream_wait += now - since
                    since = 0.0
                    self._saw(event, now)
                    answer.whole_feed(event)
                    if not watching and now >= watch_at:
                        watching = True
                        self._watch_now()
                    since = clock()
            finally:
                if since:
                    ctx.upstream_wait += clock() - since
            payload = orjson.dumps(await answer.whole_body(self._final_usage() or Usage(0, 0)))
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
                "headers": self._answer_headers(b"application/json")
                + [(b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload})
