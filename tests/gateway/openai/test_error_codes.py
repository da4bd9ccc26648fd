"""The `code` of a refused value is OpenAI's (gateway/openai/request_fields.py owns the
numeric readers every route uses): clients branch on it, so a range or type mistake
never answers `code: null`. Chat, legacy completions, the Responses API and its
`input_items` listing read their numbers through the same readers."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.errors import GatewayError
from gateway.openai.requests import parse_chat, parse_completion
from gateway.openai.responses.listing import parse_list_query
from gateway.openai.responses.request import parse_request

USER = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> Any:
    return lambda: parse_chat({"model": "m", "messages": USER, **fields}, "rid")


def completion(**fields: Any) -> Any:
    return lambda: parse_completion({"model": "m", "prompt": "hi", **fields}, "rid")


def responses(**fields: Any) -> Any:
    return lambda: parse_request({"model": "m", "input": "hi", **fields})


def refused(fn: Any) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        fn()
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(
    ("call", "param", "code", "bound"),
    [
        (chat(temperature=5), "temperature", "decimal_above_max_value", "<= 2"),
        (chat(temperature=-0.5), "temperature", "decimal_below_min_value", ">= 0"),
        (chat(top_p=1.5), "top_p", "decimal_above_max_value", "<= 1"),
        (chat(presence_penalty=-3), "presence_penalty", "decimal_below_min_value", ">= -2"),
        (chat(n=0), "n", "integer_below_min_value", ">= 1"),
        (chat(n=129), "n", "integer_above_max_value", "<= 128"),
        (chat(top_logprobs=21, logprobs=True), "top_logprobs", "integer_above_max_value", "<= 20"),
        (completion(logprobs=6), "logprobs", "integer_above_max_value", "<= 5"),
        (completion(n=0), "n", "integer_below_min_value", ">= 1"),
        (responses(max_output_tokens=15), "max_output_tokens", "integer_below_min_value", ">= 16"),
        (responses(temperature=2.5), "temperature", "decimal_above_max_value", "<= 2"),
        (lambda: parse_list_query([("limit", "0")]), "limit", "integer_below_min_value", ">= 1"),
        (lambda: parse_list_query([("limit", "101")]), "limit", "integer_above_max_value", "<= 100"),
    ],
)
def test_a_value_out_of_range_carries_openais_code_and_bound(call, param, code, bound):
    err = refused(call)
    assert (err.param, err.code) == (param, code)
    assert f"Invalid '{param}'" in err.message and f"Expected a value {bound}" in err.message


@pytest.mark.parametrize(
    ("call", "param", "got"),
    [
        (chat(temperature="hot"), "temperature", "a string"),
        (chat(n=1.5), "n", "a decimal"),
        (chat(max_tokens=True), "max_tokens", "a boolean"),
        (responses(top_p=[1]), "top_p", "an array"),
        (lambda: parse_list_query([("limit", "ten")]), "limit", "a string"),
    ],
)
def test_a_value_of_the_wrong_type_is_invalid_type(call, param, got):
    err = refused(call)
    assert (err.param, err.code) == (param, "invalid_type")
    assert f"Invalid type for '{param}'" in err.message and got in err.message


@pytest.mark.parametrize("value", [0, 2, 0.7])
def test_a_value_on_its_bound_or_inside_is_accepted(value):
    # the hostile cases' mirror: the readers refuse outside the range only
    assert parse_chat({"model": "m", "messages": USER, "temperature": value}, "rid").sampling.temperature == value
