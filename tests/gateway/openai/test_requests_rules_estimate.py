"""The prompt-token estimate quota reserves before a request runs
(gateway/openai/requests.py `estimate_prompt_tokens`): about four characters a token
(rounded down), four tokens of template per message and one more; a message's
text counted as is, its structured content and tool calls by their JSON, the
tools by theirs; a token-id prompt by its length. Each expected figure below is
worked out by hand from that rule."""

from __future__ import annotations

import orjson

from adapters.base import GenerationRequest


def estimate(**fields) -> int:
    from gateway.openai.requests import estimate_prompt_tokens

    return estimate_prompt_tokens(GenerationRequest("r", "m", **fields))


def test_text_is_four_characters_a_token_rounded_down_plus_the_template():
    # 39 characters: 9 tokens (not 10: the quotes of its JSON would make 41), +4 +1
    assert estimate(messages=[{"role": "user", "content": "x" * 39}]) == 14
    # two messages: 39 + 5 = 44 characters, 11 tokens; 4 per message; +1
    two = [{"role": "system", "content": "x" * 39}, {"role": "user", "content": "y" * 5}]
    assert estimate(messages=two) == 11 + 8 + 1


def test_content_parts_are_counted_by_their_json_and_no_content_by_nothing():
    parts = [{"type": "text", "text": "hello"}]
    size = len(orjson.dumps(parts))  # 31
    assert estimate(messages=[{"role": "user", "content": parts}]) == size // 4 + 4 + 1
    # an assistant turn without content adds its template only, not the 4 letters of "null"
    turns = [{"role": "user", "content": "x" * 7}, {"role": "assistant", "content": None}]
    assert estimate(messages=turns) == 7 // 4 + 8 + 1
    turns = [{"role": "user", "content": "x" * 7}, {"role": "assistant"}]
    assert estimate(messages=turns) == 7 // 4 + 8 + 1


def test_tool_calls_and_tools_add_their_json():
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    messages = [{"role": "user", "content": "x" * 10}, {"role": "assistant", "content": "y" * 3, "tool_calls": calls}]
    chars = 10 + 3 + len(orjson.dumps(calls))
    assert estimate(messages=messages) == chars // 4 + 8 + 1
    assert estimate(messages=messages, tools=tools) == (chars + len(orjson.dumps(tools))) // 4 + 8 + 1


def test_a_completion_prompt_is_its_characters_or_its_token_ids():
    assert estimate(kind="completion", prompt="x" * 12) == 4
    assert estimate(kind="completion", prompt="") == 1
    assert estimate(kind="completion", prompt=[5, 6, 7]) == 3


def test_the_estimate_is_a_whole_number():
    assert isinstance(estimate(messages=[{"role": "user", "content": "x" * 5}]), int)
    assert isinstance(estimate(kind="completion", prompt="x" * 5), int)
