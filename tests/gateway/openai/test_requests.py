"""Validation of OpenAI request bodies: every rule answers 400 naming the param."""

from __future__ import annotations

import json

import pytest

from adapters.errors import GatewayError
from gateway.openai.requests import parse_chat, parse_completion, parse_json_body

MSG = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def chat(**kw):
    return parse_chat({"model": "m", "messages": MSG, **kw}, "rid")


def bad(fn, param=None, status=400):
    with pytest.raises(GatewayError) as info:
        fn()
    assert info.value.status == status
    if param is not None:
        assert info.value.param == param
    return info.value


@pytest.mark.parametrize("raw", [b"", b"{", b"[1,2]", b'"x"', b"null", b"nan"])
def test_malformed_or_non_object_body_is_400(raw):
    err = bad(lambda: parse_json_body(raw))
    assert err.type == "invalid_request_error"


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", 2.5),
        ("temperature", -0.1),
        ("temperature", "hot"),
        ("top_p", 1.5),
        ("n", 0),
        ("n", 129),
        ("presence_penalty", 2.1),
        ("frequency_penalty", -3),
        ("seed", 2**63),
        ("seed", 1.5),
        ("max_tokens", 0),
        ("max_completion_tokens", -1),
        ("logit_bias", {"x": 1}),
        ("logit_bias", {"1": 101}),
    ],
)
def test_ranges(field, value):
    bad(lambda: chat(**{field: value}), field)


def test_top_logprobs_range_and_requires_logprobs():
    bad(lambda: chat(logprobs=True, top_logprobs=21), "top_logprobs")
    bad(lambda: chat(top_logprobs=2), "top_logprobs")
    r = chat(logprobs=True, top_logprobs=20)
    assert r.sampling.logprobs and r.sampling.top_logprobs == 20


def test_stop_up_to_four():
    assert chat(stop="x").sampling.stop == ["x"]
    assert chat(stop=["a", "b", "c", "d"]).sampling.stop == ["a", "b", "c", "d"]
    bad(lambda: chat(stop=["a", "b", "c", "d", "e"]), "stop")
    bad(lambda: chat(stop=[1]), "stop")


def test_stream_options_only_with_stream():
    bad(lambda: chat(stream_options={"include_usage": True}), "stream_options")
    bad(lambda: chat(stream=False, stream_options={"include_usage": True}), "stream_options")
    r = chat(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True})
    assert r.stream and r.include_usage


def test_tool_choice_rules():
    bad(lambda: chat(tool_choice="auto"), "tool_choice")  # no tools
    bad(lambda: chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice")
    bad(lambda: chat(tools=TOOLS, tool_choice="sometimes"), "tool_choice")
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert chat(tools=TOOLS, tool_choice=named).tool_choice == named
    bad(lambda: chat(tools=[{"type": "function", "function": {"name": "bad name!"}}]), "tools[0].function.name")


def test_max_completion_tokens_wins_over_max_tokens():
    assert chat(max_tokens=10, max_completion_tokens=5).sampling.max_tokens == 5
    assert chat(max_tokens=10).sampling.max_tokens == 10
    assert chat().sampling.max_tokens is None


def test_unknown_fields_kept_as_extra_and_engine_fields_read():
    r = chat(ignore_eos=True, min_tokens=3, top_k=5, vendor_thing={"a": 1})
    assert r.extra == {"vendor_thing": {"a": 1}}
    assert r.sampling.ignore_eos and r.sampling.min_tokens == 3 and r.sampling.top_k == 5


def test_messages_validation():
    bad(lambda: parse_chat({"model": "m", "messages": []}, "r"), "messages")
    bad(lambda: parse_chat({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "r"), "messages[0].role")
    bad(
        lambda: parse_chat({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "r"),
        "messages[0].tool_call_id",
    )
    bad(lambda: parse_chat({"messages": MSG}, "r"), "model")


def test_response_format():
    bad(lambda: chat(response_format={"type": "yaml"}), "response_format")
    bad(lambda: chat(response_format={"type": "json_schema"}), "response_format.json_schema")
    assert chat(response_format={"type": "text"}).response_format is None
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    assert chat(response_format=rf).response_format == rf


def test_completions_prompts_defaults_and_batches():
    (r,) = parse_completion({"model": "m", "prompt": "hi"}, "rid")
    assert r.kind == "completion" and r.sampling.max_tokens == 16 and not r.sampling.logprobs
    reqs = parse_completion({"model": "m", "prompt": ["a", "b"], "n": 2, "logprobs": 2}, "rid")
    assert [q.prompt for q in reqs] == ["a", "b"] and all(q.sampling.n == 2 for q in reqs)
    assert reqs[0].sampling.logprobs and reqs[0].sampling.top_logprobs == 2
    (t,) = parse_completion({"model": "m", "prompt": [1, 2, 3]}, "rid")
    assert t.prompt == [1, 2, 3]
    bad(lambda: parse_completion({"model": "m", "prompt": []}, "r"), "prompt")
    bad(lambda: parse_completion({"model": "m", "prompt": "x", "logprobs": 6}, "r"), "logprobs")
    bad(lambda: parse_completion({"model": "m", "prompt": "x", "suffix": "y"}, "r"), "suffix")


def test_completions_carry_response_format():
    rf = {"type": "json_object"}
    (r,) = parse_completion({"model": "m", "prompt": "x", "response_format": rf}, "rid")
    assert r.response_format == rf


@pytest.mark.parametrize("role", [[], ["user"], {}, {"a": 1}, 1, None])
def test_a_role_of_the_wrong_type_is_400(role):
    bad(lambda: parse_chat({"model": "m", "messages": [{"role": role, "content": "x"}]}, "r"), "messages[0].role")


@pytest.mark.parametrize("name", [[], ["get_weather"], {}, 7, None])
def test_a_tool_choice_name_of_the_wrong_type_is_400(name):
    bad(lambda: chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": name}}), "tool_choice")


def test_client_values_in_messages_are_clipped():
    err = bad(lambda: parse_chat({"model": "m", "messages": [{"role": "x" * 100_000, "content": "x"}]}, "r"))
    assert len(err.message) < 300
    err = bad(lambda: chat(logit_bias={"y" * 100_000: 1}), "logit_bias")
    assert len(err.message) < 300


def nested(levels: int, inner=1):
    """`levels` levels of JSON: levels-1 arrays around `inner` (a scalar is no level)."""
    value = inner
    for _ in range(levels):
        value = [value]
    return value


def body_bytes(**fields) -> bytes:
    return json.dumps({"model": "m", "messages": MSG, **fields}).encode()


@pytest.mark.parametrize(
    "field",
    ["vendor_field", "messages", "tools", "response_format", "stop"],
)
def test_nesting_past_the_limit_is_400_naming_the_field(field):
    # The body is level 1: 64 levels in all is the most a body may have.
    assert parse_json_body(body_bytes(**{field: nested(63)}))[field] == nested(63)
    err = bad(lambda: parse_json_body(body_bytes(**{field: nested(64)})), field)
    assert "64 levels" in err.message


@pytest.mark.parametrize("levels", [253, 254, 1020])
def test_nesting_the_encoder_cannot_write_is_refused_before_anything(levels):
    # orjson reads up to 1,024 levels and writes only 254.
    raw = b'{"model": "m", "messages": [{"role": "user", "content": ' + b"[" * levels + b"]" * levels + b"}]}"
    bad(lambda: parse_json_body(raw), "messages")
    beyond_the_decoder = raw.replace(b"[" * levels, b"[" * 1100).replace(b"]" * levels, b"]" * 1100)
    assert "could not parse" in bad(lambda: parse_json_body(beyond_the_decoder)).message


def test_the_depth_limit_is_configurable():
    assert parse_json_body(body_bytes(x=nested(99)), max_depth=100)["x"] == nested(99)
    bad(lambda: parse_json_body(body_bytes(x=nested(99)), max_depth=64), "x")


def test_a_deep_legitimate_json_schema_fits_with_room_to_spare():
    # OpenAI's structured outputs allow 10 levels of object nesting: each is two JSON
    # levels (`properties` -> the property), plus an array of objects at the bottom.
    schema: dict = {"type": "array", "items": {"type": "object", "properties": {"leaf": {"type": "string"}}}}
    for i in range(10):
        schema = {"type": "object", "properties": {f"level{i}": schema}, "required": [f"level{i}"]}
    tools = [{"type": "function", "function": {"name": "deep", "parameters": schema}}]
    rf = {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}
    body = parse_json_body(body_bytes(tools=tools, response_format=rf))
    depth = depth_of(body)
    assert depth <= 64 // 2, depth  # half the limit still unused
    assert parse_chat(body, "r").tools == tools


def depth_of(value) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0
