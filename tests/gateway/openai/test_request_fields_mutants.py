"""gateway/openai/request_fields.py reader by reader: the refusals' whole messages and
codes, the JSON type each wrong value is named by, keys clipped at 64 characters, and
each sampling field at, inside and past its range."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.request_fields import (
    boolean,
    integer,
    invalid_type,
    logit_bias,
    model_name,
    number,
    out_of_range,
    query_int,
    refuse_unknown,
    sampling_params,
    shown,
    shown_key,
    stop_sequences,
    stream_options,
    token_ids,
)


def refusal(call, *args, **kwargs) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        call(*args, **kwargs)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(
    ("value", "got"),
    [
        (True, "a boolean"),
        ("x", "a string"),
        (1, "an integer"),
        (1.5, "a decimal"),
        ([], "an array"),
        ({}, "an object"),
        (None, "null"),
    ],
)
def test_a_wrong_type_is_named_as_json_names_it(value, got):
    err = invalid_type("n", "a decimal", value)
    assert (err.param, err.code) == ("n", "invalid_type")
    assert err.message == f"Invalid type for 'n': expected a decimal, but got {got} instead."


@pytest.mark.parametrize(("length", "clipped"), [(63, False), (64, False), (65, True)])
def test_a_key_is_clipped_past_64_characters(length, clipped):
    key = "k" * length
    assert shown_key(key) == (key[:64] + "..." if clipped else key)


def test_stop_sequences_and_their_refusals():
    assert stop_sequences({"stop": ""}) == [] and stop_sequences({"stop": "x"}) == ["x"]
    assert stop_sequences({"stop": ["a", "", "b", "c"]}) == ["a", "b", "c"]
    err = refusal(stop_sequences, {"stop": 3})
    assert (err.param, err.message) == ("stop", "'stop' must be a string or an array of strings.")
    err = refusal(stop_sequences, {"stop": ["a"] * 5})
    assert err.message == "'stop' may hold at most 4 sequences; got 5."


def test_logit_bias_and_its_refusals():
    assert logit_bias({"logit_bias": {"5": 100, "6": -100, "7": 1}}) == {5: 100.0, 6: -100.0, 7: 1.0}
    err = refusal(logit_bias, {"logit_bias": [1]})
    assert (err.param, err.message) == ("logit_bias", "'logit_bias' must be an object mapping token ids to biases.")
    err = refusal(logit_bias, {"logit_bias": {"x": 1}})
    assert err.message == "'logit_bias' keys must be token ids (integers as strings); got 'x'."
    err = refusal(logit_bias, {"logit_bias": {"-1": 1}})
    assert err.message == "'logit_bias' has a negative token id -1."
    err = refusal(logit_bias, {"logit_bias": {"5": 100.5}})
    assert err.message == "'logit_bias' values must be numbers between -100 and 100; got 100.5 for '5'."


def test_token_ids_refusal_names_the_field():
    err = refusal(token_ids, {"stop_token_ids": [1, -1]}, "stop_token_ids")
    assert (err.param, err.message) == (
        "stop_token_ids",
        "'stop_token_ids' must be an array of non-negative token ids.",
    )


def test_stream_options_and_their_refusals():
    assert stream_options({"stream": True}) == (True, False)
    assert stream_options({"stream": True, "stream_options": {}}) == (True, False)
    assert stream_options({"stream": True, "stream_options": {"include_usage": True}}) == (True, True)
    err = refusal(stream_options, {"stream_options": {}})
    assert (err.param, err.message) == ("stream_options", "'stream_options' is only allowed when 'stream' is true.")
    err = refusal(stream_options, {"stream": True, "stream_options": 1})
    assert err.message == "'stream_options' must be an object."
    err = refusal(stream_options, {"stream": True, "stream_options": {"include_usage": 1}})
    assert (err.param, err.message) == (
        "stream_options.include_usage",
        "'stream_options.include_usage' must be a boolean.",
    )


# (field, inside its range, at its edges, just past them)
RANGES = [
    ("temperature", 0.5, [0, 2], [-0.01, 2.01]),
    ("top_p", 0.5, [0, 1], [-0.01, 1.01]),
    ("top_k", 5, [-1, 1 << 31], [-2, (1 << 31) + 1]),
    ("min_p", 0.5, [0, 1], [-0.01, 1.01]),
    ("presence_penalty", 0.5, [-2, 2], [-2.01, 2.01]),
    ("frequency_penalty", -1.5, [-2, 2], [-2.01, 2.01]),
    ("repetition_penalty", 5, [0.01, 10], [0.0, 10.01]),
]


@pytest.mark.parametrize(("name", "inside", "edges", "past"), RANGES)
def test_each_sampling_field_at_inside_and_past_its_range(name, inside, edges, past):
    for value in [inside, *edges]:
        assert getattr(sampling_params({name: value}, max_tokens=None), name) == value
    for value in past:
        assert refusal(sampling_params, {name: value}, max_tokens=None).param == name


def test_sampling_carries_max_tokens():
    assert sampling_params({}, max_tokens=7).max_tokens == 7
    assert sampling_params({"temperature": 1}, max_tokens=7).max_tokens == 7  # past the fast path too


def test_n_and_min_tokens_default_and_their_ranges():
    for body in ({}, {"temperature": 1}):  # the fast path for a body without sampling fields, and the reader
        assert (sampling_params(body, max_tokens=None).n, sampling_params(body, max_tokens=None).min_tokens) == (1, 0)
    assert sampling_params({"min_tokens": 1 << 31}, max_tokens=None).min_tokens == 1 << 31
    assert refusal(sampling_params, {"min_tokens": (1 << 31) + 1}, max_tokens=None).param == "min_tokens"


@pytest.mark.parametrize(
    ("kind", "lo", "hi", "value", "message", "code"),
    [
        ("integer", 1, 128, 0, "integer below minimum value. Expected a value >= 1, but got 0 instead.", "below_min"),
        (
            "integer",
            1,
            128,
            129,
            "integer above maximum value. Expected a value <= 128, but got 129 instead.",
            "above_max",
        ),
        (
            "decimal",
            0,
            2.5,
            -0.5,
            "decimal below minimum value. Expected a value >= 0, but got -0.5 instead.",
            "below_min",
        ),
        ("decimal", 0, 2.5, 3, "decimal above maximum value. Expected a value <= 2.5, but got 3 instead.", "above_max"),
    ],
)
def test_out_of_range_names_the_bound_crossed(kind, lo, hi, value, message, code):
    err = out_of_range("f", kind, lo, hi, value)
    assert out_of_range("f", "integer", 0, 1 << 31, 1 << 32).message.endswith(
        "<= 2147483648, but got 4294967296 instead."
    )
    assert (err.param, err.code, err.message) == ("f", f"{kind}_{code}_value", f"Invalid 'f': {message}")


def test_a_value_at_the_lower_bound_is_not_below_it():
    assert out_of_range("f", "integer", 1, 128, 1).code == "integer_above_max_value"


@pytest.mark.parametrize(
    ("value", "text"),
    [({"a": 1}, "dict"), ([1], "list"), ("v" * 62, repr("v" * 62)), ("v" * 63, repr("v" * 63)[:61] + "...")],
)
def test_a_shown_value_is_its_repr_or_its_container_type_clipped_at_64(value, text):
    assert shown(value) == text


def test_number_integer_and_query_int_refusals_say_what_was_expected_and_got():
    body = {"t": "hot", "i": 1.5, "q": 3.0}
    assert (
        refusal(number, body, "t", 0, 2).message
        == "Invalid type for 't': expected a decimal, but got a string instead."
    )
    assert refusal(number, {"t": 3}, "t", 0, 2).code == "decimal_above_max_value"
    assert refusal(integer, body, "i", 0, 9).message == (
        "Invalid type for 'i': expected an integer, but got a decimal instead."
    )
    assert integer(body, "q", 0, 9) == 3
    assert refusal(query_int, "x1", "limit", 1, 100).message == (
        "Invalid type for 'limit': expected an integer, but got a string instead."
    )
    assert refusal(query_int, "0", "limit", 1, 100).code == "integer_below_min_value"
    long = refusal(query_int, "00000100", "limit", 1, 100)  # more digits than the limit has: past it
    assert long.message == (
        "Invalid 'limit': integer above maximum value. Expected a value <= 100, but got 101 instead."
    )


def test_boolean_and_model_refusals():
    err = refusal(boolean, {"stream": "yes"}, "stream")
    assert (err.param, err.message) == ("stream", "'stream' must be a boolean, not str.")
    err = refusal(model_name, {"model": ""})
    assert (err.param, err.message) == ("model", "'model' is required and must be a non-empty string.")


def test_unknown_fields_are_refused_only_under_reject():
    refuse_unknown((), "reject")
    refuse_unknown(("x",), "pass")
    assert refusal(refuse_unknown, ("x", "y"), "reject").param == "x"
