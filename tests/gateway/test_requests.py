"""Validation of OpenAI request bodies: every rule answers 400 naming the param."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.requests import parse_chat, parse_completion, parse_json_body

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
