"""The Responses answer's exact bytes, pinned: for fixed event scripts, the streamed
answer (`ResponsesAnswer.stream_*`, what `Generation` sends) and the whole answer
(`whole_body`, serialized as `Generation` does) must equal the recorded ones byte
for byte, once the random ids and the clock are replaced by placeholders. The
encoder's fast paths (template bytes for text deltas, the response object
serialized once) are allowed to change its speed, never its output.

The recorded bytes are in wire_golden.json. A deliberate change of the wire
format regenerates them: `python -m tests.gateway.openai.responses.test_wire_golden`
(then review the diff).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from adapters.base import (
    ErrorEvent,
    Event,
    Finish,
    LogprobsDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
)
from adapters.errors import GatewayError
from gateway.openai.responses import MemoryResponseStore, prepare_response
from gateway.openai.responses.answer import ResponsesAnswer

GOLDEN = Path(__file__).with_name("wire_golden.json")
WORDS = ("alpha", "bravo", "charlie", "delta")
TOOLS = [
    {"type": "function", "name": "f", "parameters": {"type": "object"}},
    {"type": "function", "name": "g", "description": "gee", "parameters": {"type": "object"}, "strict": True},
]
LP = [
    TokenLogprob("b", -0.5, None, [TopLogprob("b", -0.5), TopLogprob("c", -1.25, [99])]),
    TokenLogprob("\u00e9", None),
]
LOGPROBS = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}

# name -> (request fields beyond model and input, the events)
SCRIPTS: dict[str, tuple[dict[str, Any], list[Event]]] = {
    "16 chunks": (
        {"max_output_tokens": 16, "store": False},
        [*(TextDelta(0, (" " if i else "") + WORDS[i % 4]) for i in range(16)), Finish(0, "stop"), Usage(7, 16)],
    ),
    "stored, echoed fields, unicode": (
        {"instructions": "be brief", "metadata": {"k": "v"}, "temperature": 0.5, "top_p": 1, "user": "u"},
        [TextDelta(0, 'h\u00e9 "q"\n'), TextDelta(0, "\u2603\U0001f600"), Finish(0, "stop"), Usage(3, 2, 1)],
    ),
    "no usage from the runtime": ({"store": False}, [TextDelta(0, "a"), TextDelta(0, "b"), Finish(0, "stop")]),
    "length": ({}, [TextDelta(0, "a"), TextDelta(0, "b"), Finish(0, "length"), Usage(3, 2)]),
    "content filter": ({}, [TextDelta(0, "a"), Finish(0, "content_filter"), Usage(3, 1)]),
    "empty text first": ({}, [TextDelta(0, ""), TextDelta(0, "a"), TextDelta(0, ""), Finish(0, "stop"), Usage(1, 1)]),
    "call then text": (
        {"tools": TOOLS, "tool_choice": "auto"},
        [
            ToolCallDelta(0, 0, "call_1", "f", '{"x": '),
            ToolCallDelta(0, 0, None, None, "1}"),
            TextDelta(0, "after"),
            TextDelta(0, " the call"),
            Finish(0, "stop"),
            Usage(5, 4),
        ],
    ),
    "text then two calls, a late name": (
        {"tools": TOOLS},
        [
            TextDelta(0, "calling"),
            ToolCallDelta(0, 0, "call_1", "f", "{}"),
            ToolCallDelta(0, 1, "call_2", None, '{"a"'),
            ToolCallDelta(0, 1, None, "g", ": 1}"),
            Finish(0, "tool_calls"),
            Usage(5, 6),
        ],
    ),
    "call cut by length": (
        {"tools": TOOLS},
        [ToolCallDelta(0, 0, "call_1", None, '{"x'), Finish(0, "length"), Usage(5, 1)],
    ),
    "logprobs": (
        LOGPROBS,
        [TextDelta(0, "a"), TextDelta(0, "b\u00e9", LP), LogprobsDelta(0, LP[:1]), Finish(0, "stop"), Usage(2, 3)],
    ),
    "error mid-stream": ({}, [TextDelta(0, "a"), ErrorEvent(GatewayError(502, "boom", code="upstream_error"))]),
    "rate limited mid-stream": ({}, [ErrorEvent(GatewayError(429, "slow down", code="rate_limit_exceeded"))]),
    "other choices ignored": (
        {},
        [TextDelta(1, "x"), TextDelta(0, "a"), Finish(1, "stop"), Finish(0, "stop"), TextDelta(0, "late"), Usage(1, 1)],
    ),
    "more of a finished call": (
        {"tools": TOOLS},
        [
            ToolCallDelta(0, 0, "call_1", "f", "{}"),
            ToolCallDelta(0, 1, "call_2", "g", "{}"),
            ToolCallDelta(0, 0, None, None, "more"),
            Finish(0, "stop"),
        ],
    ),
}

# Random ids and the clock, replaced so that the rest can be compared byte for byte.
_IDS = re.compile(rb'"(resp|msg|fc)_[0-9a-f]{48}"|"call_[0-9a-f]{24}"')
_TIMES = re.compile(rb'"(created_at|completed_at)":\d+')


def normalized(raw: bytes) -> str:
    seen: dict[bytes, bytes] = {}

    def name(match: re.Match[bytes]) -> bytes:
        return seen.setdefault(match.group(0), b'"<id%d>"' % len(seen))

    return _TIMES.sub(rb'"\1":0', _IDS.sub(name, raw)).decode()


async def _answer(fields: dict[str, Any], stream: bool) -> ResponsesAnswer:
    store = MemoryResponseStore()
    body = {"model": "m", "input": "hi", "stream": stream, **fields}
    prepared = await prepare_response(body, tenant="t", store=store, request_id="r")
    return ResponsesAnswer(prepared, store)


async def wire(name: str) -> dict[str, str]:
    """The streamed bytes and the whole answer's bytes (or its error) for script `name`."""
    fields, events = SCRIPTS[name]
    gateway_usage = Usage(9, 9)  # what the gateway counted (used when the runtime sent none)
    streamed = await _answer(fields, True)
    raw = streamed.stream_start()
    for event in events:
        raw += streamed.stream_feed(event)
    raw += await streamed.stream_end(gateway_usage)
    whole = await _answer(fields, False)
    try:
        for event in events:
            whole.whole_feed(event)
        body = orjson.dumps(await whole.whole_body(gateway_usage))
    except GatewayError as err:
        body = orjson.dumps({"raised": [err.status, err.code, err.message]})
    return {"stream": normalized(raw), "whole": normalized(body)}


def record() -> dict[str, dict[str, str]]:
    return {name: asyncio.run(wire(name)) for name in SCRIPTS}


@pytest.fixture(scope="module")
def golden() -> dict[str, dict[str, str]]:
    return json.loads(GOLDEN.read_text())


def test_every_script_is_recorded(golden):
    assert sorted(golden) == sorted(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
async def test_the_answer_is_byte_for_byte_the_recorded_one(golden, name):
    got = await wire(name)
    assert got["stream"] == golden[name]["stream"]
    assert got["whole"] == golden[name]["whole"]


def test_normalizing_keeps_what_tells_ids_apart():
    # Two different ids stay two placeholders; the same id twice stays one.
    raw = b'{"id":"resp_' + b"a" * 48 + b'","i":"msg_' + b"b" * 48 + b'","j":"msg_' + b"b" * 48 + b'","created_at":17}'
    assert normalized(raw) == '{"id":"<id0>","i":"<id1>","j":"<id1>","created_at":0}'
    # A client's own call id (not the gateway's shape) is kept as sent.
    assert normalized(b'{"call_id":"call_1"}') == '{"call_id":"call_1"}'


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(record(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {GOLDEN}")
