"""gateway/openai/requests.py's two ways through a chat body (a body that sends no chat
option skips the option readers) give the same request; and the fields every request
carries on: the ones OpenAI does not define (for the model's `unknown_params` policy)
and the session keys, each read when it is sent alone."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.errors import GatewayError
from gateway.openai.requests import parse_chat, parse_completion

USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "f"}}]
MAX = 2**31


def chat(**fields: Any):
    return parse_chat({"model": "m", "messages": USER, **fields}, "rid")


def refused(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as info:
        chat(**fields)
    assert (info.value.status, info.value.param) == (400, param)


@pytest.mark.parametrize("option", [{"tools": TOOLS}, {"logprobs": True}], ids=["tools", "logprobs"])
def test_max_tokens_beside_a_chat_option_spans_one_to_two_to_the_31(option):
    assert chat(**option, max_tokens=1).sampling.max_tokens == 1
    assert chat(**option, max_tokens=700).sampling.max_tokens == 700
    assert chat(**option, max_tokens=MAX).sampling.max_tokens == MAX
    assert chat(**option).sampling.max_tokens is None
    refused({**option, "max_tokens": MAX + 1}, "max_tokens")
    refused({**option, "max_tokens": 0}, "max_tokens")


def test_a_body_without_chat_options_has_the_options_defaults():
    r = chat(max_tokens=9)
    assert (r.tools, r.tool_choice, r.response_format, r.parallel_tool_calls) == (None, None, None, True)
    assert r.sampling.max_tokens == 9


def test_fields_openai_does_not_define_are_named_and_its_unread_ones_are_not():
    for r in (chat(vendor_knob=1, reasoning_effort="low"), chat(tools=TOOLS, vendor_knob=1, reasoning_effort="low")):
        assert r.extra == {"vendor_knob": 1, "reasoning_effort": "low"}
        assert r.unknown_fields == ("vendor_knob",)
    assert chat(reasoning_effort="low").unknown_fields == ()
    assert chat().unknown_fields == ()
    batch = parse_completion({"model": "m", "prompt": ["a", "b"], "vendor_knob": 1, "verbosity": "low"}, "rid")
    assert [r.unknown_fields for r in batch] == [("vendor_knob",), ("vendor_knob",)]
    (plain,) = parse_completion({"model": "m", "prompt": "a", "verbosity": "low"}, "rid")
    assert plain.unknown_fields == ()


def test_each_session_key_is_read_when_sent_alone():
    assert chat(prompt_cache_key="conv-1").session_keys == {"prompt_cache_key": "conv-1"}
    assert chat(user="u1").session_keys == {"user": "u1"}
    assert chat().session_keys == {}
