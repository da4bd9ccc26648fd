"""Hostile requests: junk of every type at every path answers a 400 naming a
param, never another exception; big inputs stay linear and bounded."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.errors import GatewayError
from gateway.openai.responses.conversation import build_generation
from gateway.openai.responses.request import DEFAULT_ONLY, SUPPORTED, parse_request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
ITEM_TYPES = ["message", "function_call", "function_call_output", "reasoning", "input_text", None]
ITEM_KEYS = ["type", "role", "content", "call_id", "name", "arguments", "output", "text", "id", "status"]
PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "refusal", "input_image", 3])},
    optional={"text": json_values, "refusal": json_values},
)
ITEM = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(ITEM_TYPES) | json_values,
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | json_values,
        "content": st.text(max_size=4) | st.lists(PART | json_values, max_size=3) | json_values,
        "call_id": st.sampled_from(["c1", "c2"]) | json_values,
        "name": st.sampled_from(["f", "g"]) | json_values,
        "arguments": st.text(max_size=4) | json_values,
        "output": st.text(max_size=4) | st.lists(PART, max_size=2) | json_values,
    },
)
TOOL = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["function", "web_search"]) | json_values,
        "name": st.sampled_from(["f", "g", "bad name"]) | json_values,
        "parameters": st.just({"type": "object"}) | json_values,
        "strict": json_values,
        "description": json_values,
    },
)
FIELDS = {
    "input": st.text(max_size=4) | st.lists(ITEM | json_values, max_size=5) | json_values,
    "tools": st.lists(TOOL | json_values, max_size=3) | json_values,
    "tool_choice": st.sampled_from(["auto", "none", "required"])
    | st.fixed_dictionaries({"type": st.just("function"), "name": st.sampled_from(["f", "g"]) | json_values})
    | json_values,
    "text": st.fixed_dictionaries({}, optional={"format": json_values, "verbosity": json_values}) | json_values,
    "include": st.lists(st.sampled_from(["message.output_text.logprobs", "x"]) | json_values, max_size=2) | json_values,
    "metadata": st.dictionaries(st.text(max_size=70), st.text(max_size=4) | json_values, max_size=18) | json_values,
    "stream_options": st.dictionaries(st.sampled_from(["include_obfuscation", "x"]), json_values) | json_values,
}
BODY = st.fixed_dictionaries(
    {"model": st.just("m") | json_values},
    optional={
        **FIELDS,
        **{name: json_values for name in sorted((SUPPORTED | set(DEFAULT_ONLY)) - set(FIELDS) - {"model"})},
        "unknown_field": json_values,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODY)
def test_any_body_is_translated_or_refused_with_a_400_naming_a_param(body):
    try:
        request = parse_request(body)
        generation = build_generation(request, [], request_id="r", tenant="t")
    except GatewayError as err:
        assert err.status == 400
        assert err.param, err.message
        assert len(err.message) < 600
        return
    assert generation.messages
    for message in generation.messages:
        assert message["role"] in ("system", "developer", "user", "assistant", "tool")


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_value_as_the_body(value):
    try:
        parse_request(value)
    except GatewayError as err:
        assert err.status == 400
    else:
        assert isinstance(value, dict) and value.get("model")


def test_many_input_items_translate_in_linear_time():
    items = [{"role": "user", "content": f"m{i}"} for i in range(50_000)]
    started = time.perf_counter()
    gen = build_generation(parse_request({"model": "m", "input": items}), [], request_id="r", tenant=None)
    assert len(gen.messages) == 50_000
    assert time.perf_counter() - started < 10


def test_many_function_call_outputs_check_their_calls_in_linear_time():
    items = []
    for i in range(20_000):
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "x"})
    started = time.perf_counter()
    gen = build_generation(parse_request({"model": "m", "input": items}), [], request_id="r", tenant=None)
    assert len(gen.messages) == 40_000
    assert time.perf_counter() - started < 10
