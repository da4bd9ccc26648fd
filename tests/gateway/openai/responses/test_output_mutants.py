"""What a mutation run of gateway/openai/responses/output.py left open: the bytes a
runtime gave for a token (a byte-fallback piece is not its text's UTF-8) are kept in
a message's logprobs, and a call announced under one name keeps it whatever a later
piece names."""

from __future__ import annotations

from adapters.base import Finish, TextDelta, TokenLogprob, ToolCallDelta, TopLogprob
from gateway.openai.responses.output import OutputState

# One byte of a three-byte character: the runtime's bytes, not "\ufffd".encode()
PARTIAL = [226]


def test_a_message_s_logprobs_keep_the_runtime_s_bytes():
    state = OutputState(logprobs=True)
    top = [TopLogprob("\ufffd", -0.1, PARTIAL), TopLogprob("x", -2.0)]
    state.feed(TextDelta(0, "\ufffd", [TokenLogprob("\ufffd", -0.1, PARTIAL, top)]))
    state.feed(Finish(0, "stop"))
    [logprob] = state.output()[0]["content"][0]["logprobs"]
    assert logprob["bytes"] == PARTIAL
    assert [a["bytes"] for a in logprob["top_logprobs"]] == [PARTIAL, [120]]  # the second: "x" as UTF-8


def test_a_call_keeps_the_name_it_was_announced_with():
    state = OutputState(logprobs=False)
    added = state.feed(ToolCallDelta(0, 0, "call_1", "f", '{"a":'))
    assert [e["type"] for e in added] == ["response.output_item.added", "response.function_call_arguments.delta"]
    assert added[0]["item"]["name"] == "f"
    state.feed(ToolCallDelta(0, 0, None, "g", "1}"))
    done = state.feed(Finish(0, "tool_calls"))
    assert done[0]["type"] == "response.function_call_arguments.done" and done[0]["name"] == "f"
    assert state.output()[0]["name"] == "f" and state.output()[0]["arguments"] == '{"a":1}'
