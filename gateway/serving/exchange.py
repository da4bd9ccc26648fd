"""One admitted exchange, run inside the ASGI response that answers it: the one
runner under both the streamed generations (generation.py) and the one-shot calls
(oneshot.py).

Running the work inside the response (rather than before returning it) lets one
watcher see the client leave in every phase: while waiting for the upstream, between
stream chunks, during a whole answer. When the client leaves, the task is cancelled,
which closes the upstream work. The runner owns what every exchange does the same
way: that watcher, the in-flight gauge, the client's deadline, a bug answered as 500,
and at the end one release of the ticket (with the usage and the phase the client
left in) and one recorder call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from starlette.responses import Response

from adapters.base import Usage
from adapters.errors import FailureKind, GatewayError, deadline_exceeded, internal_error
from gateway.http.envelope import error_response
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.recorder import RequestRecorder
from gateway.protection.gate import Ticket
from gateway.serving.phases import CancelPhase

log = logging.getLogger("switchyard.gateway")

# The watcher task (the only per-request task) starts once an exchange has lasted this
# long: most answers are over before a client could notice a delay.
WATCH_AFTER_S = 0.02


class ExchangeRunner(Response):
    """An ASGI response that runs the exchange it answers. A subclass writes `_run`
    (the work and the answer) and keeps `phase`, `usage`, `backend`, `status`,
    `error` and `code` true as it goes. A `Response` so that FastAPI's routes pass it
    through as any response; Response's own body and headers are not used."""

    background = None  # FastAPI attaches its background tasks to a returned Response

    # What has not happened yet, as class defaults: an exchange writes its own as it goes
    # (nothing to write per request for a state it starts in).
    usage: Usage | None = None
    backend: str | None = None
    status = 200
    error: str | None = None
    code: str | None = None
    failure: FailureKind | None = None  # the error's own kind (GatewayError.failure)
    started = False  # http.response.start was sent
    ended = False  # the answer's last message is being sent: nothing may follow it
    # The disconnect watcher's state, set by __call__: the exchange is done; the client left.
    _done = False
    _gone = False
    _task: asyncio.Task | None = None
    _receive: Callable[[], Awaitable[dict]] | None = None
    _timer: asyncio.TimerHandle | None = None
    _watcher: asyncio.Task | None = None

    def __init__(
        self, recorder: RequestRecorder, ctx: RequestContext, ticket: Ticket, deadline: float | None, phase: CancelPhase
    ) -> None:
        self.recorder = recorder
        self.ctx = ctx
        self.ticket = ticket
        self.deadline = deadline
        self.phase = phase  # where a client leaving would find the exchange now

    async def __call__(self, scope, receive, send) -> None:
        self._task = task = asyncio.current_task()
        self._receive = receive
        # A stream starts watching when its answer starts, whatever the clock says: a
        # timer can fire late on a loaded machine (docs/architecture.md, "A request's way").
        self._timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, self._watch_now)
        gauge = self.recorder.inflight(self.ctx.model or "-")
        gauge.inc()
        cancelled: CancelPhase | None = None
        clean = False
        try:
            if self.deadline is None:
                await self._run(send)
            else:
                await self._run_by_deadline(send)
            clean = True
        except asyncio.CancelledError:
            if not self._gone:
                raise  # the server is shutting down, not the client leaving
            task.uncancel()  # type: ignore[union-attr]
            cancelled = self.phase
            self.status, self.error = 499, "client disconnected"
        except Exception:
            # A bug, not the client: the access log says 500, and so does the client
            # when nothing was sent yet (else the connection is cut mid-answer).
            log.exception("%s failed", self.ctx.operation)
            err = internal_error()
            if self.started:
                self.status, self.error, self.failure = 500, err.message, err.failure
                raise
            await self._send_error(send, err)
        finally:
            self._done = True
            self._timer.cancel()
            if self._watcher is not None:
                self._watcher.cancel()
            gauge.dec()
            usage = self._final_usage()
            release = self.ticket.release(usage, cancelled)
            await (release if clean else asyncio.shield(release))
            self.recorder.finish(self.ctx, self._outcome(usage, cancelled))

    def _watch_now(self) -> None:
        """Start the disconnect watcher (the only per-request task), once."""
        if not self._done and self._watcher is None and self._timer is not None:
            self._timer.cancel()
            self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        receive = self._receive
        assert receive is not None and self._task is not None
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self._done:
            self._gone = True
            self._task.cancel()

    def _final_usage(self) -> Usage | None:
        """What the ticket is released with and the metrics count."""
        return self.usage

    def _outcome(self, usage: Usage | None, cancelled: CancelPhase | None) -> Outcome:
        return Outcome(self.status, usage, self.backend, self.error, cancelled, code=self.code, failure=self.failure)

    def _extra_headers(self) -> dict[str, str]:
        held = self.ticket.headers  # the quota's rate-limit headers (none without a quota)
        return {k: str(v) for k, v in held.items()} if held else {}

    async def _send_error(self, send, err: GatewayError) -> None:
        """`err` as the whole answer (nothing was sent yet)."""
        self.status, self.error, self.code, self.failure = err.status, err.message, err.code, err.failure
        resp = error_response(err, self.ctx.request_id)
        resp.headers.update(self._extra_headers())
        self.started = self.ended = True
        await send({"type": "http.response.start", "status": resp.status_code, "headers": resp.raw_headers})
        await send({"type": "http.response.body", "body": resp.body})

    async def _run_by_deadline(self, send) -> None:
        """The exchange, cancelled at the deadline its client set (the upstream work is
        aborted as when the client leaves): 504 before the answer started; after, the
        subclass ends what it began (`_past_deadline`)."""
        assert self.deadline is not None
        scope = asyncio.timeout_at(self.deadline)  # the event loop's clock is time.monotonic()
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
                self.status, self.error, self.code, self.failure = err.status, err.message, err.code, err.failure
                await self._past_deadline(send, err)

    async def _run(self, send) -> None:
        raise NotImplementedError

    async def _past_deadline(self, send, err: GatewayError) -> None:
        """End an answer already under way at the deadline (a stream: its error event)."""
