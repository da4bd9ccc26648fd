"""What the approximate prefix index reads of a request, exactly: the rendered
text a chat template would lay out (tools, then each message's role, content and
tool calls, in order), which prompts are cut as token ids, the full-block
boundary, and the index's default size."""

from __future__ import annotations

from adapters.base import GenerationRequest
from policies.prefix_index import BLOCK_CHARS, BLOCK_TOKENS, PrefixIndex, prompt_blocks, rendered_prompt


def test_a_chat_renders_tools_then_each_role_content_and_tool_calls_in_order():
    tools = [{"type": "function", "function": {"name": "f"}}]
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    req = GenerationRequest(
        "r",
        "m",
        tools=tools,
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "content": "42"},
        ],
    )
    assert rendered_prompt(req) == "\x1e".join(
        [
            '[{"type":"function","function":{"name":"f"}}]',
            "system\x1fbe brief",
            'user\x1f[{"type":"text","text":"hi"}]',
            "assistant\x1f",
            '[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]',
            "tool\x1f42",
        ]
    )


def test_a_chat_without_tools_starts_with_its_first_message():
    req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
    assert rendered_prompt(req) == "user\x1fhi"


def test_a_completion_renders_its_text_prompt_and_nothing_for_token_ids():
    assert rendered_prompt(GenerationRequest("r", "m", kind="completion", prompt="once upon")) == "once upon"
    assert rendered_prompt(GenerationRequest("r", "m", kind="completion", prompt=[1, 2, 3])) == ""


def test_only_full_blocks_are_named():
    text = GenerationRequest("r", "m", kind="completion", prompt="a" * (2 * BLOCK_CHARS - 1))
    assert len(prompt_blocks(text)) == 1
    ids = GenerationRequest("r", "m", kind="completion", prompt=list(range(2 * BLOCK_TOKENS - 1)))
    assert len(prompt_blocks(ids)) == 1


def test_a_text_prompt_is_cut_in_characters_not_as_token_ids():
    # 32 characters would be two blocks of 16 "tokens" if the text were cut as ids
    req = GenerationRequest("r", "m", kind="completion", prompt="b" * (2 * BLOCK_TOKENS))
    assert prompt_blocks(req) == []


def test_the_default_index_holds_65536_blocks():
    index = PrefixIndex()
    index.record(list(range(65_537)))
    assert len(index) == 65_536
    assert index.match([0]) == 1  # the head is kept: the tail went first
