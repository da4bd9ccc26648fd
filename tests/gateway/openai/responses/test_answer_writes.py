"""A Responses stream through the gateway's `Generation` (in process, a scripted
adapter, a real Protection): how its frames are grouped into writes.

One write per upstream event, as chat's stream, except what the finish causes,
which goes out with the terminal frames (gateway/openai/responses/answer.py). The
events still arrive complete and in order, whatever ends the stream (its end, a
deadline, the client leaving), and a client that leaves still frees everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from adapters.base import Event, Finish, TextDelta, Usage
from conformance.responses_sse import parse_responses_stream
from gateway.openai.responses import MemoryResponseStore, prepare_response
from gateway.openai.responses.answer import ResponsesAnswer
from gateway.serving.phases import CancelPhase
from tests.gateway.scripted import HANG, ScriptedAdapter, always
from tests.gateway.serving.test_generation import Run
from tests.gateway.serving.test_generation import generate as generate_with

TEXT = [TextDelta(0, "Hel"), TextDelta(0, "lo"), TextDelta(0, " there")]


def types(run: Run) -> list[str]:
    return [e["type"] for e in parse_responses_stream(run.body).events]


async def generate(
    adapter: ScriptedAdapter,
    *,
    leave: Callable[[Run], Awaitable[None]] | None = None,
    deadline_s: float | None = None,
    **body: Any,
) -> Run:
    """One `POST /v1/responses` stream answered by `adapter`, run to its end (the
    harness of tests/gateway/serving/test_generation.py with the Responses answer format)."""
    store = MemoryResponseStore()
    prepared = await prepare_response(
        {"model": "m", "input": "hi", "stream": True, **body}, tenant="", store=store, request_id="rid-1"
    )
    request = prepared.generation
    if deadline_s is not None:
        request.deadline = asyncio.get_running_loop().time() + deadline_s
    return await generate_with(adapter, request, leave=leave, answer=ResponsesAnswer(prepared, store))


@pytest.mark.parametrize("store", [False, True])
async def test_one_write_per_event_and_the_finish_with_the_terminal_frames(store):
    script: list[Event] = [*TEXT, Finish(0, "stop"), Usage(3, 3)]
    run = await generate(ScriptedAdapter("b1", always(*script)), store=store)
    stream = parse_responses_stream(run.body)
    assert stream.violations == []
    # The opening frames ride with the first text, each later text is one write, and
    # the finish's frames, the usage and the end are one last write: a write fewer
    # than one per event, and every event where the schema puts it.
    assert len(run.writes) == len(TEXT) + 1
    assert [e["type"] for e in parse_responses_stream(run.writes[-1]).events] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in stream.events] == list(range(len(stream.events)))
    final = stream.events[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == "Hello there" and final["usage"]["output_tokens"] == 3


async def test_a_deadline_after_the_finish_sends_what_the_finish_caused_before_the_error():
    # The runtime finished, then never sent its usage nor ended the stream.
    run = await generate(ScriptedAdapter("b1", always(*TEXT, Finish(0, "stop"), HANG)), deadline_s=0.3)
    stream = parse_responses_stream(run.body)
    assert stream.violations == []
    assert types(run)[-5:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "error",
        "response.failed",
    ]
    assert [e["sequence_number"] for e in stream.events] == list(range(len(stream.events)))
    assert len(run.releases) == 1 and run.inflight == 0


async def test_a_client_leaving_after_the_finish_frees_everything():
    adapter = ScriptedAdapter("b1", always(*TEXT, Finish(0, "stop"), HANG))

    async def after_the_text(run: Run) -> None:
        while len(run.writes) < len(TEXT):
            run.body_seen.clear()
            await run.body_seen.wait()
        await asyncio.sleep(0.05)  # the finish is read: the upstream hangs before its end

    run = await generate(adapter, leave=after_the_text)
    [(usage, phase)] = run.releases
    assert phase == CancelPhase.MID_STREAM and usage is not None and usage.completion_tokens == len(TEXT)
    assert run.inflight == 0 and adapter.ended == 1  # the upstream stream was closed
    # What was written is the stream's beginning, whole events in order.
    events = parse_responses_stream(run.body).events
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.output_text.delta"
