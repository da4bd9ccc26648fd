"""The gateway's error type and its builders (adapters/errors.py): the OpenAI `type`
for each status, the envelope, and each upstream failure's status, code, whether
it may fail over, and a message that names the runtime's fault but never the
backend (its name goes to the log)."""

from __future__ import annotations

import pytest

from adapters.errors import (
    FailureKind,
    GatewayError,
    client_closed,
    context_length_exceeded,
    deadline_exceeded,
    default_type,
    internal_error,
    invalid_request,
    model_not_found,
    no_backend,
    prompt_param,
    rollout_bad_action,
    rollout_not_found,
    rollout_refused,
    rollout_store_unavailable,
    unsupported_call,
    upstream_busy,
    upstream_failed,
    upstream_timeout,
    upstream_unavailable,
)
from policies.redact import shown_name


def fields(err: GatewayError) -> tuple:
    """Everything a builder decides: status, message, type, code, param, failure kind,
    Retry-After and the cancellation's phase."""
    return (err.status, err.message, err.type, err.code, err.param, err.failure, err.retry_after, err.cancelled_phase)


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


@pytest.mark.parametrize(
    "status, failure",
    [(499, None), (500, FailureKind.SERVER_ERROR), (501, FailureKind.SERVER_ERROR), (502, FailureKind.SERVER_ERROR),
     (503, FailureKind.OVERLOAD), (504, FailureKind.TIMEOUT)],
)  # fmt: skip
def test_a_5xx_is_a_backend_failure_by_its_status_from_500_on(status, failure):
    assert GatewayError(status, "m").failure is failure
    assert GatewayError(status, "m", failure=FailureKind.CONNECT).failure is FailureKind.CONNECT


def test_the_envelope_shows_a_param_as_a_client_name_is_shown():
    err = GatewayError(400, "bad", param="tools[0]\nfunction")
    assert err.to_dict()["error"]["param"] == shown_name("tools[0]\nfunction") == "tools[0]\\u000afunction"
    assert GatewayError(400, "bad").to_dict()["error"]["param"] is None


def test_the_prompt_s_field_is_prompt_on_legacy_completions_only():
    assert [prompt_param(kind) for kind in ("completion", "chat", "responses")] == ["prompt", "messages", "messages"]
    assert context_length_exceeded("too long", "completion").param == "prompt"
    assert context_length_exceeded("too long", "chat").param == "messages"


def test_an_internal_error_blames_the_gateway_and_is_no_backend_failure():
    assert fields(internal_error()) == (
        500, "The gateway hit an internal error; it has been logged.", "server_error", "internal_error", None,
        FailureKind.SERVER_ERROR, None, None,
    )  # fmt: skip


def test_no_backend_names_the_model_when_known_and_asks_for_a_retry():
    assert fields(no_backend("m1")) == (
        503, "No backend of model `m1` could take the request.", "service_unavailable_error", "no_backend_available",
        None, FailureKind.OVERLOAD, 1.0, None,
    )  # fmt: skip
    assert no_backend().message == no_backend("").message == "No backend of this model could take the request."


def test_an_unsupported_call_names_the_model_and_its_runtimes():
    assert fields(unsupported_call("m1", "embeddings", ["vLLM", "TGI"])) == (
        400, "The model `m1` does not serve embeddings: its backends (vLLM, TGI) do not offer it.",
        "invalid_request_error", "unsupported_by_runtime", "model", None, None, None,
    )  # fmt: skip


def test_a_client_that_left_is_a_499_with_its_phase():
    assert fields(client_closed("queued")) == (
        499, "The client closed the request.", "invalid_request_error", "client_closed", None, None, None, "queued",
    )  # fmt: skip
    assert client_closed().cancelled_phase is None
    assert GatewayError(499, "m", cancelled_phase="streaming").cancelled_phase == "streaming"


def test_each_upstream_failure_s_kind_and_its_log_line(caplog):
    caplog.set_level("WARNING", logger="switchyard.upstream")
    assert upstream_unavailable("gpu-3", "refused").failure is FailureKind.CONNECT  # not the 503's overload
    assert upstream_busy("gpu-3", "pool full", 2.5).failure is FailureKind.OVERLOAD
    assert upstream_timeout("gpu-3", "read", 1.0, first_byte=True).failure is FailureKind.TIMEOUT
    upstream_failed("gpu-3", "bad JSON", internal="at byte 17")
    upstream_failed("gpu-4", "y")
    assert caplog.messages == [
        "backend gpu-3 unavailable: refused",
        "backend gpu-3 busy: pool full",
        "backend gpu-3 timed out: read",
        "backend gpu-3 failed: bad JSON (at byte 17)",
        "backend gpu-4 failed: y",
    ]


def test_the_rollout_admin_api_s_errors():
    assert fields(rollout_not_found("m\n1")) == (
        404, "No rollout is configured for the model `m\\u000a1`.", "invalid_request_error", "not_found", None, None,
        None, None,
    )  # fmt: skip
    assert fields(rollout_bad_action("go\n", ("start", "promote"))) == (
        400, "Unknown rollout action `go\\u000a`: one of start, promote.", "invalid_request_error", "invalid_action",
        None, None, None, None,
    )  # fmt: skip
    assert fields(rollout_refused("Nothing to promote.")) == (
        409, "Nothing to promote.", "invalid_request_error", "rollout_state_conflict", None, None, None, None,
    )  # fmt: skip
    assert fields(rollout_store_unavailable()) == (
        503, "The rollout state store is unavailable; traffic keeps the last known shares.",
        "service_unavailable_error", "rollout_store_unavailable", None, FailureKind.OVERLOAD, 1.0, None,
    )  # fmt: skip
