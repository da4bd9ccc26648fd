"""A one-shot call (`/v1/embeddings`, `/tokenize`, `/detokenize`: one upstream call,
one JSON answer), run by the exchange runner (exchange.py) once the front door
(gateway/intake.py) admitted it.

Backends are the model's capable ones in its routing order (`intake.capable_order`);
a failure that is the backend's (`GatewayError.fails_over`) moves on to the next, a
client's mistake (4xx) is the answer. Every attempt's outcome feeds the pool's outlier
detector, and ejected backends are skipped, as for generations.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from starlette.responses import Response

from adapters.base import Adapter, GenerationRequest, SamplingParams, Usage
from adapters.errors import GatewayError, no_backend
from gateway.http.envelope import json_response
from gateway.intake import Admitted, Intent, Parse
from gateway.observe.recorder import RequestRecorder
from gateway.serving.dispatch import Blame, FailureListener
from gateway.serving.exchange import ExchangeRunner
from gateway.serving.phases import CancelPhase
from policies.auth import Principal

log = logging.getLogger("switchyard.oneshot")

T = TypeVar("T")


def route_request(request_id: str, model: str, prompt: Any = None, messages: list | None = None) -> GenerationRequest:
    """The stand-in routing and admission read: the prompt (or messages) for the routing
    key, no completion budget."""
    return GenerationRequest(
        request_id=request_id,
        model=model,
        kind="chat" if messages is not None else "completion",
        messages=messages,
        prompt=prompt,
        sampling=SamplingParams(max_tokens=0),
    )


class OneShotCall(ExchangeRunner, Generic[T]):
    """The ASGI response that makes the call it answers: `invoke` on each backend in
    order until one answers, then `answer` -> (JSON payload, usage charged)."""

    def __init__(
        self,
        recorder: RequestRecorder,
        admitted: Admitted,
        invoke: Callable[[Adapter], Awaitable[T]],
        answer: Callable[[T], tuple[Any, Usage]],
        on_failure: FailureListener | None = None,
    ) -> None:
        deadline = admitted.requests[0].deadline
        super().__init__(recorder, admitted.ctx, admitted.ticket, deadline, CancelPhase.NON_STREAMING)
        self.pool = admitted.pool
        self.backends = admitted.backends
        self.route_request = admitted.requests[0]  # the stand-in an attempt's span is named after
        self.invoke = invoke
        self.answer = answer
        self.on_failure = on_failure

    async def _run(self, send) -> None:
        started = time.perf_counter()
        try:
            result = await self._first_answer()
        except GatewayError as err:
            await self._send_error(send, err)
            return
        finally:
            self.ctx.upstream_wait += time.perf_counter() - started
        payload, self.usage = self.answer(result)
        headers = {"x-request-id": self.ctx.request_id, **self._extra_headers()}
        response = json_response(payload, 200, headers)
        self.started = self.ended = True
        await send({"type": "http.response.start", "status": 200, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body})

    async def _first_answer(self) -> T:
        # A reload may have dropped the model since admission: its pool still serves this
        # call, and its detector still counts.
        ejection = self.pool.ejection
        blame = Blame(self.ctx.tenant or "")
        last: GatewayError | None = None
        try:
            for backend in self.backends:
                if ejection.is_ejected(backend.name):
                    continue
                self.backend = backend.name  # the one a client leaving would find at work
                backend.inflight += 1
                attempt = self.ctx.trace.attempt(backend, self.route_request)  # its CLIENT span
                try:
                    result = await self.invoke(backend.adapter)
                except BaseException as err:
                    attempt.end(err)
                    if not isinstance(err, GatewayError):
                        raise
                    if self.on_failure is not None:
                        self.on_failure(backend.name, err)
                    if not err.fails_over or err.failure is None:
                        blame.answered(self.pool, backend.name)  # the backend answered: the fault is the request's
                        raise
                    if blame.failed(self.pool, backend.name, err.failure):
                        raise  # the same failure on a second backend: the request's, tried no further
                    log.warning("backend %s failed a %s call: %s", backend.name, self.ctx.model, err.message)
                    last = err
                else:
                    attempt.end()
                    blame.answered(self.pool, backend.name)
                    return result
                finally:
                    backend.inflight -= 1
        finally:
            blame.settle()
        raise last or no_backend()


# What the routes build their exchange with: (admitted, invoke, answer) -> the OneShotCall.
MakeCall = Callable[..., Response]


def oneshot_parse(parse: Callable[[Any, str], Intent]) -> Parse:
    """A one-shot route's body reader (body, request id) as the front door's `Parse`."""

    async def read(body: Any, request_id: str, principal: Principal) -> Intent:
        return parse(body, request_id)

    return read
