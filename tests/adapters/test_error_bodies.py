"""Reading an upstream error body field by field (adapters/runtime_errors.py): each
shape's message, type, claimed status, param and string code; what counts as a
status; the fallback rule for statuses outside the table; when the body's own
code wins over the HTTP status; and a failure after the first event, which is
never the client's fault. tests/adapters/test_runtime_errors.py drives the same
code through each runtime's adapter with recorded shapes."""

from __future__ import annotations

import orjson
import pytest

from adapters.errors import GatewayError
from adapters.runtime_errors import (
    BACKEND_FAULT,
    CLIENT_MISTAKE,
    ParsedError,
    mid_stream_failure,
    parse_error_body,
    runtime_error,
    upstream_status,
)


def b(obj) -> bytes:
    return orjson.dumps(obj)


@pytest.mark.parametrize(
    "body, parsed",
    [
        (
            b({"error": {"message": "m", "type": "BadRequestError", "param": "n", "code": 400}}),
            ParsedError("m", "BadRequestError", 400, "n", None),
        ),
        (
            {"error": {"message": "m", "type": 7, "param": 7, "code": "context_length_exceeded"}},
            ParsedError("m", None, None, None, "context_length_exceeded"),
        ),
        ({"error": {"detail": "from detail", "code": "503"}}, ParsedError("from detail", None, 503)),
        ({"error": {"message": 12, "code": ""}}, ParsedError("12", None, None, None, None)),
        ({"error": {}}, ParsedError("", None, None, None, None)),
        ({"error": {"http_status_code": 424, "code": 99}}, ParsedError("", None, 424)),
        ({"error": "text", "error_type": "overloaded", "code": 429}, ParsedError("text", "overloaded", 429)),
        ({"error": "text", "error_type": ["x"], "code": "429"}, ParsedError("text", None, 429)),
        ({"detail": "FastAPI says no"}, ParsedError("FastAPI says no")),
        ({"detail": 5}, ParsedError("5")),
        ({"odd": 1}, ParsedError("")),  # a flat object without a message: the status will speak
        ({"error": 5, "detail": "d"}, ParsedError("d")),
        ({"error": 5, "detail": 0}, ParsedError("0")),
        ({"error": None}, ParsedError('{"error":null}')),
        ("  plain words \n", ParsedError("plain words")),
        (b"\xff\xfe not utf-8", ParsedError("\ufffd\ufffd not utf-8")),
        ('"a json string"', ParsedError("a json string")),
        (b"[1, 2]", ParsedError("[1, 2]")),
        (b"   ", ParsedError("")),
        (None, ParsedError("")),
        ('{"error": "from a str body"}', ParsedError("from a str body")),
    ],
)
def test_each_body_shape_reads_into_its_fields(body, parsed):
    assert parse_error_body(body) == parsed


def test_long_bodies_are_cut_to_500_characters():
    assert parse_error_body(b"x" * 600).message == "x" * 500
    odd = {"error": [1], "pad": "y" * 600}
    assert parse_error_body(b(odd)).message == b(odd).decode()[:500]
    assert len(parse_error_body("[" + "1," * 400 + "1]").message) == 500


@pytest.mark.parametrize(
    "code, status",
    [(100, 100), (599, 599), (99, None), (600, None), ("100", 100), ("599", 599), ("600", None), ("99", None)],
)
def test_a_claimed_status_is_a_number_from_100_to_599(code, status):
    assert parse_error_body({"error": {"message": "m", "code": code}}).code == status


def test_a_boolean_is_not_a_status():
    assert parse_error_body({"error": "m", "code": True}).code is None


@pytest.mark.parametrize("status, rule", [(400, CLIENT_MISTAKE), (418, CLIENT_MISTAKE), (499, CLIENT_MISTAKE)])
def test_statuses_outside_the_table_are_client_mistakes_below_500(status, rule):
    assert upstream_status(status) is rule


@pytest.mark.parametrize("status", [399, 500, 505, 302])
def test_everything_else_outside_the_table_is_the_backends_fault(status):
    assert upstream_status(status) is BACKEND_FAULT


@pytest.mark.parametrize("http_status", [200, 500, 502])
def test_the_bodys_own_code_wins_under_a_status_that_hides_it(http_status):
    err = runtime_error(http_status, {"error": {"message": "full", "code": 503}}, backend="b", runtime="vLLM")
    assert (err.status, err.code, err.fails_over) == (503, "backend_unavailable", True)


@pytest.mark.parametrize("http_status", [201, 400, 503])
def test_otherwise_the_http_status_decides(http_status):
    err = runtime_error(http_status, {"error": {"message": "m", "code": 429}}, backend="b", runtime="vLLM")
    assert err.status == upstream_status(http_status).status


def test_a_fault_names_the_runtime_to_the_client_and_the_backend_in_the_log(caplog):
    err = runtime_error(500, b"boom", backend="gpu-5", runtime="SGLang")
    assert err.message == "The SGLang backend serving this model failed: boom"
    assert "gpu-5" not in err.message
    assert caplog.records[-1].getMessage() == "backend gpu-5 (SGLang) answered 500: boom"
    assert runtime_error(500, b"", backend="b", runtime="TGI").message.endswith("failed: HTTP 500")


def test_a_failure_after_the_first_event_is_a_502_whatever_its_status(caplog):
    client_looking = GatewayError(400, "engine crashed", code="bad")
    err = mid_stream_failure(client_looking, "gpu-5")
    assert (err.status, err.code, err.type) == (502, "upstream_error", "server_error")
    assert err.message == "The backend serving this model failed: engine crashed"
    assert caplog.records[-1].getMessage() == "backend gpu-5 failed mid-stream: engine crashed"
    worded = mid_stream_failure(GatewayError(429, "The vLLM backend serving this model is overloaded: x"), "b")
    assert worded.message == "The vLLM backend serving this model is overloaded: x"  # not said twice


@pytest.mark.parametrize("status", [502, 504])
def test_a_backend_fault_or_timeout_mid_stream_is_kept_as_it_is(status):
    err = GatewayError(status, "as the adapter said", code="upstream_timeout")
    assert mid_stream_failure(err, "b") is err
    assert mid_stream_failure(GatewayError(503, "x"), "b").status == 502
