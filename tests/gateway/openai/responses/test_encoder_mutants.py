"""What a mutation run of gateway/openai/responses/encoder.py left open: the frame
heads written from a cold cache (each event type its own `event:` line, however many
types come), a stream that stored nothing ending with one output item that is not a
message closed by the finish, and a response failed after a cut finish, which is
failed and not incomplete."""

from __future__ import annotations

import pytest

import gateway.openai.responses.encoder as encoder_module
from adapters.base import ErrorEvent, Finish, TextDelta, TokenLogprob, ToolCallDelta, Usage
from adapters.errors import GatewayError
from gateway.openai.responses.encoder import ResponseAssembly, ResponseStreamEncoder
from gateway.openai.responses.request import parse_request
from gateway.openai.responses.response_object import new_shell
from tests.gateway.openai.responses.official import sse_events

TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]


def assembly(**body) -> ResponseAssembly:
    request = parse_request({"model": "m", "input": "hi", **body})
    return ResponseAssembly(new_shell(request, "resp_test", 1_700_000_000), logprobs=request.logprobs)


def test_every_event_type_gets_its_own_event_line_from_a_cold_cache(monkeypatch):
    monkeypatch.setattr(encoder_module, "_HEADS", {})
    enc = ResponseStreamEncoder(assembly(tools=TOOLS))
    raw = enc.feed(ToolCallDelta(0, 0, "call_1", "f", "{}")) + enc.feed(Finish(0, "tool_calls"))
    frames = [f for f in raw.split(b"\n\n") if f]
    assert len(frames) == 4  # added, arguments delta, arguments done, item done
    for frame in frames:
        head, _, data = frame.partition(b"\ndata: ")
        assert head.startswith(b"event: ") and data.startswith(b'{"type":"' + head[7:] + b'"')
    assert sse_events(raw)[-1]["type"] == "response.output_item.done"


@pytest.mark.parametrize(
    ("events", "body"),
    [
        ([ToolCallDelta(0, 0, "call_1", "f", '{"a":1}'), Finish(0, "tool_calls")], {"tools": TOOLS}),
        (
            [TextDelta(0, "a", [TokenLogprob("a", -0.5)]), Finish(0, "stop")],
            {"include": ["message.output_text.logprobs"]},
        ),
    ],
    ids=["one call", "one message with logprobs"],
)
def test_a_stream_that_stored_nothing_ends_with_its_one_item(events, body):
    """One output item that no template closed (a call, or a message with logprobs):
    the terminal object is built from the state."""
    asm = assembly(store=False, **body)
    enc = ResponseStreamEncoder(asm)
    raw = enc.start() + b"".join(enc.feed(e) for e in events) + enc.terminal()
    final = sse_events(raw)[-1]
    assert final["type"] == "response.completed"
    assert final["response"]["output"] == asm.result()["output"] and len(final["response"]["output"]) == 1


def test_a_failure_after_a_cut_finish_is_failed_without_incomplete_details():
    asm = assembly()
    for event in (TextDelta(0, "a"), Finish(0, "length"), Usage(1, 1)):
        asm.feed(event)
    assert asm.result()["incomplete_details"] == {"reason": "max_output_tokens"}
    asm.feed(ErrorEvent(GatewayError(504, "The request took too long.", code="timeout")))
    result = asm.result()
    assert result["status"] == "failed" and result["incomplete_details"] is None
    assert result["error"] == {"code": "server_error", "message": "The request took too long."}
