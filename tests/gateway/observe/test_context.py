"""gateway/observe/context.py: a refusal's outcome (status, message, code, the phase a client
left in, never admitted), the low-cardinality error type, the untraced request's hooks that
change nothing, and the current trace a task sets and reads."""

from __future__ import annotations

import asyncio

from adapters.base import GenerationRequest
from adapters.errors import GatewayError
from gateway.observe.context import (
    NO_ATTEMPT,
    NO_STEP,
    NO_TRACE,
    Outcome,
    RequestContext,
    current_trace,
    error_type,
    make_current,
)
from gateway.serving.phases import CancelPhase


def test_a_refusal_is_an_outcome_never_admitted_with_the_errors_status_message_and_code():
    outcome = Outcome.refused(GatewayError(429, "slow down", code="rate_limit_exceeded"))
    assert (outcome.status, outcome.error, outcome.code) == (429, "slow down", "rate_limit_exceeded")
    assert outcome.admitted is False and outcome.cancelled_phase is None
    assert (outcome.usage, outcome.backend, outcome.rollout, outcome.failure) == (None, None, None, None)


def test_a_client_leaving_the_queue_keeps_the_phase_it_left_in():
    err = GatewayError(499, "client closed the request", code="client_closed")
    err.cancelled_phase = "queued"
    outcome = Outcome.refused(err)
    assert outcome.cancelled_phase is CancelPhase.QUEUED and outcome.admitted is False


def test_the_error_type_is_the_code_else_the_status_else_the_class():
    assert error_type(GatewayError(503, "busy", code="backend_busy")) == "backend_busy"
    assert error_type(GatewayError(502, "bad")) == "502"
    assert error_type(TimeoutError()) == "TimeoutError"


def test_an_untraced_request_goes_upstream_unchanged_and_its_hooks_do_nothing():
    request = GenerationRequest(model="m", messages=[{"role": "user", "content": "hi"}], request_id="r")
    assert NO_TRACE.attempt(None, request) is NO_ATTEMPT  # type: ignore[arg-type]
    assert NO_ATTEMPT.stamp(request) is request
    assert NO_ATTEMPT.end(ValueError()) is None
    with NO_TRACE.step("queue") as step:
        assert step is NO_STEP and NO_TRACE.step("auth") is NO_STEP
        assert step.set("k", 1) is None
    assert NO_TRACE.parsed(request) is None and NO_TRACE.first_token(0.1) is None
    ctx = RequestContext("id", 0.0, "chat")
    assert ctx.trace is NO_TRACE and NO_TRACE.finish(ctx, Outcome(200)) is None
    assert NO_TRACE.finish_reason("stop") is None


async def test_a_task_sees_the_trace_it_made_current_and_its_children_inherit_it():
    assert current_trace() is NO_TRACE

    class Trace:
        pass

    trace = Trace()

    async def serve():
        make_current(trace)  # type: ignore[arg-type]
        child = asyncio.create_task(asyncio.sleep(0, current_trace()))
        return current_trace(), await child

    assert await asyncio.create_task(serve()) == (trace, trace)
    assert current_trace() is NO_TRACE  # the task's own context, not the caller's
