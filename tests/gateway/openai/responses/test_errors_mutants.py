"""The Responses API's refusals as a tenant reads them (status, message, param, code),
and the clipping of client values in messages at, below and above its 64 characters."""

from __future__ import annotations

import pytest

from gateway.openai.responses.errors import (
    clip,
    not_found,
    response_too_large,
    short,
    store_full,
    store_unavailable,
    unsupported,
)


def fields(err) -> tuple:
    return err.status, err.message, err.param, err.code


def test_each_refusal_says_what_it_is():
    assert fields(store_unavailable()) == (
        503,
        "The response store is unavailable. Retry shortly.",
        None,
        "response_store_unavailable",
    )
    assert fields(store_full()) == (503, "The response store is full. Retry later.", None, "response_store_full")
    assert fields(response_too_large(2000, 1000)) == (
        413,
        "The response would take at least 2000 bytes to store, more than the 1000 this gateway stores per tenant. "
        "Send it with store: false, or make it smaller (input, instructions, tools, text.format).",
        "store",
        "response_too_large",
    )
    assert fields(not_found("resp_x", "response_id")) == (
        404,
        "Response with id 'resp_x' not found.",
        "response_id",
        "not_found",
    )
    assert fields(unsupported("No.", "include")) == (400, "No.", "include", "unsupported_parameter")


@pytest.mark.parametrize(
    ("length", "clipped"),
    [(63, False), (64, False), (65, True), (200, True)],
)
def test_a_client_value_is_clipped_past_64_characters_of_its_repr(length, clipped):
    value = "v" * (length - 2)  # its repr adds the two quotes
    text = short(value)
    if clipped:
        assert text == repr(value)[:61] + "..." and len(text) == 64
    else:
        assert text == repr(value)


@pytest.mark.parametrize(
    ("length", "clipped"),
    [(63, False), (64, False), (65, True), (200, True)],
)
def test_a_client_key_is_clipped_past_64_characters(length, clipped):
    key = "k" * length
    assert clip(key) == (key[:64] + "..." if clipped else key)
