"""The gateway's error type and its builders (adapters/errors.py): the OpenAI `type`
for each status, the envelope, and each upstream failure's status, code, whether
it may fail over, and a message that names the runtime's fault but never the
backend (its name goes to the log)."""

from __future__ import annotations

import pytest

from adapters.errors import (
    FailureKind,
    GatewayError,
    context_length_exceeded,
    deadline_exceeded,
    default_type,
    invalid_request,
    model_not_found,
    upstream_busy,
    upstream_failed,
    upstream_timeout,
    upstream_unavailable,
)


@pytest.mark.parametrize(
    "status, kind",
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "invalid_request_error"),
        (409, "invalid_request_error"),
        (429, "rate_limit_error"),
        (499, "invalid_request_error"),
        (500, "server_error"),
        (502, "server_error"),
        (503, "service_unavailable_error"),
        (504, "server_error"),
    ],
)
def test_each_status_has_its_openai_error_type(status, kind):
    assert default_type(status) == kind
    assert GatewayError(status, "m").type == kind


def test_an_error_keeps_what_it_was_given_and_defaults_the_rest():
    plain = GatewayError(400, "bad")
    assert (plain.status, plain.message, plain.code, plain.param) == (400, "bad", None, None)
    assert (plain.fails_over, plain.retry_after, plain.headers, str(plain)) == (False, None, {}, "bad")
    full = GatewayError(
        429,
        "slow down",
        type="custom",
        code="c",
        param="p",
        failure=FailureKind.CONNECT,
        retry_after=2.0,
        headers={"x": "1"},
    )
    assert (full.type, full.code, full.param, full.fails_over, full.retry_after, full.headers) == (
        "custom",
        "c",
        "p",
        True,
        2.0,
        {"x": "1"},
    )
    assert full.to_dict() == {"error": {"message": "slow down", "type": "custom", "param": "p", "code": "c"}}
    assert repr(full) == "GatewayError(429, 'c', 'slow down')"


def test_client_mistakes():
    err = invalid_request("bad n", param="n", code="invalid_value")
    assert (err.status, err.message, err.param, err.code) == (400, "bad n", "n", "invalid_value")
    assert (invalid_request("x").param, invalid_request("x").code) == (None, None)
    ctx = context_length_exceeded("too long")
    assert (ctx.status, ctx.message, ctx.param, ctx.code) == (400, "too long", "messages", "context_length_exceeded")
    missing = model_not_found("gpt-x")
    assert (missing.status, missing.param, missing.code, missing.type) == (
        404,
        "model",
        "model_not_found",
        "invalid_request_error",
    )
    assert missing.message == "The model `gpt-x` does not exist or you do not have access to it."


def test_an_unavailable_backend_may_fail_over_and_is_not_named(caplog):
    err = upstream_unavailable("gpu-3", "connection refused")
    assert (err.status, err.code, err.fails_over, err.retry_after) == (503, "backend_unavailable", True, None)
    assert err.message == "The backend serving this model is unavailable."
    assert "gpu-3" in caplog.text and "connection refused" in caplog.text


def test_a_busy_backend_says_how_long_was_waited_and_when_to_retry(caplog):
    err = upstream_busy("gpu-3", "pool full", 2.5)
    assert (err.status, err.code, err.fails_over, err.retry_after) == (503, "backend_busy", True, 1.0)
    assert err.message == "The backend serving this model has no free connection (waited 2.5 s); retry later."
    assert "gpu-3" in caplog.text and "pool full" in caplog.text


def test_a_timeout_is_one_before_the_first_byte_and_mid_answer(caplog):
    before = upstream_timeout("gpu-3", "read timeout", 30.0, first_byte=True)
    assert (before.status, before.code, before.fails_over) == (504, "upstream_timeout", True)
    assert before.message == "The backend serving this model did not start answering within 30 s."
    assert before.failure is FailureKind.TIMEOUT
    during = upstream_timeout("gpu-3", "read timeout", 7.5, first_byte=False)
    # Its kind, as a rollout classes it; after the first event nothing fails over (dispatch.py).
    assert during.failure is FailureKind.TIMEOUT
    assert during.message == (
        "The backend serving this model stopped sending in the middle of its answer within 7.5 s."
    )
    assert "gpu-3" in caplog.text


def test_a_failed_backend_tells_the_detail_and_only_logs_the_internal_part(caplog):
    err = upstream_failed("gpu-3", "bad JSON", internal="at byte 17")
    assert (err.status, err.code, err.failure) == (502, "upstream_error", FailureKind.SERVER_ERROR)
    assert err.message == "The backend serving this model failed: bad JSON"
    assert "at byte 17" not in err.message and "gpu-3" not in err.message
    assert "gpu-3" in caplog.text and "(at byte 17)" in caplog.text
    assert upstream_failed("gpu-3", "x", 500).status == 500
    caplog.clear()
    upstream_failed("gpu-4", "y")
    assert "gpu-4" in caplog.text and "(" not in caplog.messages[-1]


def test_a_passed_client_deadline_is_a_504_saying_so_and_where():
    # One builder for the exchange's 504 and the admission queue's (with its wait there).
    e = deadline_exceeded()
    assert (e.status, e.code, e.retry_after, e.failure) == (504, "deadline_exceeded", None, FailureKind.TIMEOUT)
    assert e.message == "The request did not complete within the timeout the client set."
    queued = deadline_exceeded(2.04, "m")
    assert (queued.status, queued.code) == (504, "deadline_exceeded")
    assert queued.message == (
        "The request did not complete within the timeout the client set: it waited 2.0 s in the queue for model `m`."
    )
