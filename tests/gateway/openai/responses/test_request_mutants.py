"""gateway/openai/responses/request.py's refusals as the client reads them: each one's
whole message, param and code (the request tests check the status and the param)."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.request import parse_request


def refusal(body) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        parse_request(body)
    assert info.value.status == 400
    return info.value


def base(**fields) -> dict:
    return {"model": "m", "input": "hi", **fields}


def test_a_body_that_is_not_an_object_names_its_type():
    err = refusal(["model"])
    assert (err.message, err.param) == ("The request body must be a JSON object, not list.", None)


def test_an_optional_string_of_another_type_names_it():
    err = refusal(base(instructions=3))
    assert (err.message, err.param) == ("'instructions' must be a string, not int.", "instructions")


def test_a_safety_identifier_at_below_and_above_its_limit():
    assert parse_request(base(safety_identifier="s" * 63)).safety_identifier == "s" * 63
    assert parse_request(base(safety_identifier="s" * 64)).safety_identifier == "s" * 64
    err = refusal(base(safety_identifier="s" * 65))
    assert err.message == "'safety_identifier' may have at most 64 characters; got 65."
    assert err.param == "safety_identifier"


def test_stream_options_without_stream():
    err = refusal(base(stream_options={"include_obfuscation": False}))
    assert (err.message, err.param) == ("'stream_options' is only allowed when 'stream' is true.", "stream_options")
    assert parse_request(base(stream_options=None)).stream is False


def test_stream_options_that_is_not_an_object():
    err = refusal(base(stream=True, stream_options=[]))
    assert (err.message, err.param) == ("'stream_options' must be an object.", "stream_options")


def test_include_obfuscation_must_be_a_boolean_and_false():
    err = refusal(base(stream=True, stream_options={"include_obfuscation": "no"}))
    assert err.message == "'stream_options.include_obfuscation' must be a boolean."
    assert err.param == "stream_options.include_obfuscation"
    err = refusal(base(stream=True, stream_options={"include_obfuscation": True}))
    assert err.message == "'stream_options.include_obfuscation' true is not supported by this gateway."
    assert (err.param, err.code) == ("stream_options.include_obfuscation", "unsupported_parameter")
    assert parse_request(base(stream=True, stream_options={"include_obfuscation": False})).stream is True


def test_a_default_only_parameter_passes_with_its_default_and_only_its_exact_type():
    assert parse_request(base(background=False, truncation="disabled", reasoning=None)).model == "m"
    for value in (0, "false", True):
        err = refusal(base(background=value))
        assert (err.param, err.code) == ("background", "unsupported_parameter")


def test_a_default_only_parameter_with_another_value_is_named_with_it():
    err = refusal(base(background=True))
    assert err.message == "'background' True is not supported by this gateway."


def test_top_logprobs_at_below_and_above_its_bounds():
    logprobs = ["message.output_text.logprobs"]
    assert parse_request(base(top_logprobs=0)).top_logprobs == 0  # 0 needs no include: it asks for none
    assert parse_request(base(top_logprobs=20, include=logprobs)).top_logprobs == 20
    assert parse_request(base(top_logprobs=19, include=logprobs)).top_logprobs == 19
    assert parse_request(base()).top_logprobs is None
    assert (refusal(base(top_logprobs=-1)).param, refusal(base(top_logprobs=21, include=logprobs)).param) == (
        "top_logprobs",
        "top_logprobs",
    )
    err = refusal(base(top_logprobs=1))
    assert err.message == "'top_logprobs' needs 'include' to contain 'message.output_text.logprobs'."


@pytest.mark.parametrize(
    ("name", "lowest", "highest", "below", "above"),
    [
        ("max_output_tokens", 16, 1 << 31, 15, (1 << 31) + 1),
        ("max_tool_calls", 0, 1 << 31, -1, (1 << 31) + 1),
        ("temperature", 0, 2, -0.01, 2.01),
        ("top_p", 0, 1, -0.01, 1.01),
    ],
)
def test_each_number_at_below_and_above_its_bounds(name, lowest, highest, below, above):
    for fine in (lowest, highest):
        assert getattr(parse_request(base(**{name: fine})), name) == fine
    for bad, code in ((below, "below_min_value"), (above, "above_max_value")):
        err = refusal(base(**{name: bad}))
        assert err.param == name and err.code is not None and err.code.endswith(code), (name, bad, err.code)
