"""policies/token_bound.py, figure by figure: what each part of a prompt adds to the
bound (the special tokens once, the template allowance per message, the UTF-8 bytes of
text, the JSON bytes of tools and tool calls), so that a dropped or flipped term fails."""

from __future__ import annotations

import orjson

from adapters.base import GenerationRequest
from policies.token_bound import (
    SPECIAL_TOKENS_PER_PROMPT,
    TEMPLATE_TOKENS_PER_MESSAGE,
    inputs_token_bound,
    prompt_token_bound,
    requests_token_bound,
    text_token_bound,
)

SPECIAL, PER_MESSAGE = SPECIAL_TOKENS_PER_PROMPT, TEMPLATE_TOKENS_PER_MESSAGE
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CALLS = [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]


def chat(messages, tools=None) -> GenerationRequest:
    return GenerationRequest("r", "m", messages=messages, tools=tools)


def completion(prompt) -> GenerationRequest:
    return GenerationRequest("r", "m", kind="completion", prompt=prompt)


def test_text_counts_its_utf8_bytes():
    assert [text_token_bound(t) for t in ("", "abc", "é", "😀")] == [0, 3, 2, 4]
    assert text_token_bound("\ud800") == 3  # a lone surrogate is counted, never an error


def test_one_message_costs_the_special_tokens_the_template_and_its_text():
    assert prompt_token_bound(chat([{"role": "user", "content": "hi"}])) == SPECIAL + PER_MESSAGE + 2


def test_a_message_without_content_costs_the_template_only():
    assert prompt_token_bound(chat([{"role": "assistant", "content": None}])) == SPECIAL + PER_MESSAGE
    assert prompt_token_bound(chat([{"role": "assistant"}])) == SPECIAL + PER_MESSAGE


def test_every_message_adds_up():
    two = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert prompt_token_bound(chat(two)) == SPECIAL + 2 * PER_MESSAGE + 2 + 5


def test_tool_calls_cost_their_json_bytes():
    message = {"role": "assistant", "content": None, "tool_calls": CALLS}
    assert prompt_token_bound(chat([message])) == SPECIAL + PER_MESSAGE + len(orjson.dumps(CALLS))


def test_content_parts_cost_their_json_bytes():
    parts = [{"type": "text", "text": "hi"}]
    assert prompt_token_bound(chat([{"role": "user", "content": parts}])) == SPECIAL + PER_MESSAGE + len(
        orjson.dumps(parts)
    )


def test_tools_cost_their_json_bytes_once_and_an_empty_list_nothing():
    hi = [{"role": "user", "content": "hi"}]
    plain = SPECIAL + PER_MESSAGE + 2
    assert prompt_token_bound(chat(hi, tools=TOOLS)) == plain + len(orjson.dumps(TOOLS))
    assert prompt_token_bound(chat(hi, tools=[])) == plain
    assert prompt_token_bound(chat(hi, tools=None)) == plain


def test_a_text_prompt_costs_its_bytes_and_the_special_tokens():
    assert prompt_token_bound(completion("abc")) == 3 + SPECIAL
    assert prompt_token_bound(completion("é")) == 2 + SPECIAL
    assert prompt_token_bound(completion("")) == SPECIAL
    assert prompt_token_bound(completion(None)) == SPECIAL


def test_a_token_id_prompt_costs_its_length_exactly():
    assert prompt_token_bound(completion([1, 2, 3])) == 3
    assert prompt_token_bound(completion([])) == 0


def test_inputs_count_ids_exactly_and_texts_by_their_bound():
    assert inputs_token_bound([[1, 2], "é", ""]) == 2 + (2 + SPECIAL) + SPECIAL
    assert inputs_token_bound([]) == 0


def test_a_batch_of_prompts_is_bound_by_the_sum_of_each_bound():
    reqs = [GenerationRequest("r", "m", prompt="hello"), GenerationRequest("r", "m", prompt=[1, 2, 3])]
    assert requests_token_bound(reqs) == prompt_token_bound(reqs[0]) + 3 == len("hello") + SPECIAL + 3
    assert requests_token_bound([]) == 0
