"""gateway/http/envelope.py: every error in one OpenAI envelope; Retry-After in whole
seconds rounded up past a millisecond (at least 1), 1 s on a 429 or 503 that brought no estimate of its
own and none on another status; the request id and the error's own headers kept; and
the router's 404 and 405 in the same envelope, naming what the listener serves."""

from __future__ import annotations

import orjson
import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request

from adapters.errors import GatewayError
from gateway.http.envelope import error_response, json_response, route_error_handler


def test_a_json_response_is_the_payload_with_its_status_and_headers() -> None:
    resp = json_response({"a": [1, "é"]}, 201, {"x-k": "v"})
    assert resp.status_code == 201 and orjson.loads(resp.body) == {"a": [1, "é"]}
    assert resp.headers["content-type"] == "application/json" and resp.headers["x-k"] == "v"
    assert json_response([]).status_code == 200


def test_an_error_is_the_envelope_with_its_status_request_id_and_headers() -> None:
    err = GatewayError(400, "bad thing", code="bad", param="n", headers={"x-ratelimit-limit-requests": "5"})
    resp = error_response(err, "req-1")
    assert resp.status_code == 400 and resp.headers["content-type"] == "application/json"
    assert orjson.loads(resp.body) == err.to_dict()
    assert resp.headers["x-request-id"] == "req-1" and resp.headers["x-ratelimit-limit-requests"] == "5"
    assert "retry-after" not in resp.headers
    assert err.headers == {"x-ratelimit-limit-requests": "5"}  # the error's own headers are not changed


@pytest.mark.parametrize("request_id", [None, ""])
def test_without_a_request_id_none_is_sent(request_id) -> None:
    assert "x-request-id" not in error_response(GatewayError(400, "x"), request_id).headers


@pytest.mark.parametrize(
    ("retry_after", "header"),
    [(0.0, "1"), (0.2, "1"), (1.0, "1"), (1.0005, "1"), (1.002, "2"), (1.5, "2"), (2.0, "2"), (30.0, "30")],
)
def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one(retry_after, header) -> None:
    resp = error_response(GatewayError(429, "slow down", retry_after=retry_after))
    assert resp.headers["retry-after"] == header


@pytest.mark.parametrize(("status", "header"), [(429, "1"), (503, "1"), (500, None), (502, None), (400, None)])
def test_a_429_or_503_without_an_estimate_says_one_second(status, header) -> None:
    assert error_response(GatewayError(status, "x")).headers.get("retry-after") == header


def test_another_status_with_an_estimate_keeps_it() -> None:
    assert error_response(GatewayError(504, "x", retry_after=3.2)).headers["retry-after"] == "4"


def request(method: str, path: str) -> Request:
    return Request({"type": "http", "method": method, "path": path, "headers": [], "query_string": b""})


async def handled(exc: Exception, method: str = "GET", path: str = "/v1/nope") -> tuple[int, dict]:
    resp = await route_error_handler("the OpenAI API under /v1")(request(method, path), exc)
    return resp.status_code, orjson.loads(resp.body)["error"]


async def test_a_404_names_the_route_and_what_is_served() -> None:
    status, error = await handled(HTTPException(404))
    assert (status, error["code"], error["type"]) == (404, "not_found", "invalid_request_error")
    assert error["message"] == "No route GET /v1/nope. This gateway serves the OpenAI API under /v1."


async def test_a_405_names_the_method_and_the_path() -> None:
    status, error = await handled(HTTPException(405), "DELETE", "/v1/models")
    assert (status, error["code"]) == (405, "method_not_allowed")
    assert error["message"] == "Method DELETE is not allowed on /v1/models."


async def test_another_http_error_keeps_its_status_and_detail() -> None:
    status, error = await handled(HTTPException(409, detail="busy here"))
    assert (status, error["message"], error["code"]) == (409, "busy here", None)


async def test_anything_else_is_a_500_that_shows_nothing_of_it() -> None:
    status, error = await handled(RuntimeError("boom"))
    assert (status, error["message"], error["type"]) == (500, "", "server_error")
