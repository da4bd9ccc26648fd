"""gateway/http/deadline.py's answers: a bad timeout header's 400 shows the value it
got, cut to 32 characters (29 and "...") past that."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.http.deadline import client_timeout_s


@pytest.mark.parametrize(
    ("raw", "shown"), [("x" * 31, "x" * 31), ("x" * 32, "x" * 32), ("x" * 33, "x" * 29 + "..."), (" 0 ", " 0 ")]
)
def test_a_bad_value_is_shown_whole_up_to_32_characters(raw, shown) -> None:
    with pytest.raises(GatewayError) as exc:
        client_timeout_s({"x-request-timeout": raw})
    e = exc.value
    assert e.message == f"The 'x-request-timeout' header must be a positive number of seconds; got {shown!r}."
    assert (e.status, e.code, e.type) == (400, "invalid_request_timeout", "invalid_request_error")


def test_the_header_found_is_named_with_its_seconds() -> None:
    assert client_timeout_s({"x-stainless-timeout": " 2.5\t"}) == ("x-stainless-timeout", 2.5)
    assert client_timeout_s({"x-stainless-read-timeout": "3"}, stream=True) is None
    assert client_timeout_s({"x-stainless-read-timeout": "3"}) == ("x-stainless-read-timeout", 3.0)


def test_the_smallest_positive_timeout_is_taken() -> None:
    assert client_timeout_s({"x-request-timeout": "0.001"}) == ("x-request-timeout", 0.001)
