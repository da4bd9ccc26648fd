"""A Generation at its edges: an answer format with opening frames (as the
Responses API's), the deadline striking while the last message is being written,
several retry backoffs, and the outcome of a client leaving. In process, with the
harness of test_generation_wire.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from adapters.base import Event, Finish, GenerationRequest, TextDelta, Usage
from adapters.errors import FailureKind, GatewayError, deadline_exceeded
from gateway.openai.requests import estimate_prompt_tokens
from gateway.serving import exchange as exchange_module
from gateway.serving.phases import CancelPhase
from tests.gateway.scripted import HANG, Pause, ScriptClock, ScriptedAdapter, always
from tests.gateway.serving.test_generation import chat, sse_data
from tests.gateway.serving.test_generation_wire import Served, answered, one
from tests.gateway.serving.test_internal_errors import Broken


class Framed:
    """An answer format that writes each event as a tag, with opening frames (the
    Responses API's `response.created` is one), and records the usage it ends with."""

    def __init__(self) -> None:
        self.response_id = "framed-1"
        self.ended_with: list[Usage | None] = []

    def stream_start(self) -> bytes:
        return b"<open>"

    def stream_feed(self, event: Event) -> bytes:
        if isinstance(event, TextDelta):
            return f"<{event.text}>".encode() if event.text else b""  # (an empty piece writes nothing)
        return b"<finish>" if isinstance(event, Finish) else b""

    async def stream_end(self, usage: Usage | None) -> bytes:
        self.ended_with.append(usage)
        return b"<end>"

    def whole_feed(self, event: Event) -> None:
        pass

    async def whole_body(self, usage: Usage) -> dict[str, Any]:
        return {"usage": [usage.prompt_tokens, usage.completion_tokens]}


def script(*items: Any):
    return lambda request: list(items)


async def test_the_opening_frames_go_out_with_the_first_event_and_nothing_is_sent_empty():
    framed = Framed()
    events = script(TextDelta(0, "a"), TextDelta(0, ""), TextDelta(0, "b"), Finish(0, "stop"), Usage(4, 2))
    served = await one(ScriptedAdapter("b1", events), chat(), answer=framed)
    assert [m["body"] for m in served.bodies] == [b"<open><a>", b"<b>", b"<finish>", b"<end>"]
    assert framed.ended_with == [Usage(4, 2)]  # the runtime's own count
    assert served.ctx.response_id == "framed-1"


async def test_the_opening_frames_go_out_even_when_the_first_event_writes_nothing():
    framed = Framed()
    request = chat()
    events = script(TextDelta(0, ""), TextDelta(0, "a"), Finish(0, "stop"))
    served = await one(ScriptedAdapter("b1", events), request, answer=framed)
    assert [m["body"] for m in served.bodies] == [b"<open>", b"<a>", b"<finish>", b"<end>"]


async def test_a_stream_without_a_runtime_count_ends_with_the_gateways():
    framed = Framed()
    request = chat()
    await one(ScriptedAdapter("b1", script(TextDelta(0, "a"), Finish(0, "stop"))), request, answer=framed)
    assert framed.ended_with == [Usage(estimate_prompt_tokens(request), 1)]


async def test_a_whole_answer_in_another_format_gets_the_usage_seen():
    request = chat(stream=False)
    served = await one(ScriptedAdapter("b1", script(TextDelta(0, "a"), Finish(0, "stop"))), request, answer=Framed())
    assert orjson.loads(served.body) == {"usage": [estimate_prompt_tokens(request), 1]}


# ---- the deadline, at the very end ------------------------------------------------------------------------


def by(seconds: float, stream: bool) -> GenerationRequest:
    return chat(stream=stream, deadline=time.monotonic() + seconds)


async def test_the_deadline_mid_stream_writes_the_last_message_as_the_last():
    served = await one(ScriptedAdapter("b1", always(TextDelta(0, "Hi"), HANG)), by(0.2, stream=True))
    bodies = served.bodies
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert sse_data(served.body)[-2]["error"]["code"] == "deadline_exceeded"
    o = served.outcome
    assert (o.status, o.code, o.error) == (504, "deadline_exceeded", deadline_exceeded().message)


async def test_a_deadline_while_the_streams_last_message_is_written_adds_nothing_after_it():
    served = await one(ScriptedAdapter("b1", answered), by(0.3, stream=True), last_send_s=0.6)
    last = served.bodies[-1]
    assert served.sent[-1] is not None and last["more_body"] is False
    assert sse_data(served.body)[-1] == "[DONE]" and b"deadline_exceeded" not in served.body
    assert len([m for m in served.bodies if not m["more_body"]]) == 1


async def test_a_deadline_while_a_whole_answer_is_written_adds_nothing_after_it():
    served = await one(ScriptedAdapter("b1", answered), by(0.3, stream=False), last_send_s=0.6)
    assert [m["type"] for m in served.sent] == ["http.response.start", "http.response.body"]
    assert served.outcome.status == 200  # answered in full: neither a 504 nor a 500
    assert orjson.loads(served.body)["choices"][0]["message"]["content"] == "Hi there"


async def test_a_deadline_while_an_error_response_is_written_adds_nothing_after_it():
    refused = ScriptedAdapter("b1", always(GatewayError(400, "bad", param="messages")))
    served = await one(refused, by(0.3, stream=True), last_send_s=0.6)
    assert [m["type"] for m in served.sent] == ["http.response.start", "http.response.body"]
    assert served.start["status"] == 400 and served.outcome.status == 400


# ---- retry backoffs -------------------------------------------------------------------------------------


async def test_every_retry_backoff_is_counted(monkeypatch):
    clock = ScriptClock(monkeypatch)
    calls: list[GenerationRequest] = []

    def down_twice(request: GenerationRequest) -> list:
        calls.append(request)
        return [GatewayError(503, "down", failure=FailureKind.CONNECT)] if len(calls) < 3 else answered(request)

    model = {"backends": ["b1"], "max_retries": 2, "retry_backoff_s": 0.1}  # 0.1 s, then 0.2 s
    served = await one(ScriptedAdapter("b1", down_twice), chat(), model=model)
    assert len(calls) == 3 and served.outcome.status == 200
    assert clock.slept == [0.1, 0.2] and served.ctx.backoff_wait == pytest.approx(0.3)


# ---- the client leaving ----------------------------------------------------------------------------------


async def test_a_client_leaving_is_a_499_outcome_saying_so():
    served = await one(ScriptedAdapter("b1", always(TextDelta(0, "Hi"), HANG)), chat(), leave_after=0.1)
    o = served.outcome
    assert (o.status, o.error, o.cancelled_phase) == (499, "client disconnected", CancelPhase.MID_STREAM)
    assert o.backend == "b1" and o.usage is not None and o.usage.completion_tokens == 1


async def test_a_stream_watches_for_the_client_from_its_start_not_only_after_the_timer(monkeypatch):
    # The watcher's timer never fires within the test: only the stream's start can have
    # started the watcher (a timer can lag seconds behind the close that woke the loop).
    monkeypatch.setattr(exchange_module, "WATCH_AFTER_S", 3600.0)
    served = await asyncio.wait_for(
        one(ScriptedAdapter("b1", always(TextDelta(0, "Hi"), HANG)), chat(), leave_after=0.05), timeout=10
    )
    assert (served.outcome.status, served.outcome.cancelled_phase) == (499, CancelPhase.MID_STREAM)


async def test_a_stream_started_after_the_timer_keeps_its_one_watcher(monkeypatch):
    # The timer fires while the upstream is still silent, then the stream starts:
    # the start must not add a second watcher (two readers of one ASGI receive).
    monkeypatch.setattr(exchange_module, "WATCH_AFTER_S", 0.0)
    script = always(Pause(0.05), TextDelta(0, "Hi"), HANG)
    served = await asyncio.wait_for(one(ScriptedAdapter("b1", script), chat(), leave_after=0.2), timeout=10)
    assert (served.outcome.status, served.outcome.cancelled_phase) == (499, CancelPhase.MID_STREAM)
    assert served.receives == 1


async def test_a_whole_answer_watches_from_an_event_when_the_timer_lags(monkeypatch):
    # The timer is set for an hour (it never fires here); once the request is under
    # way the threshold drops, and an upstream event must start the watcher.
    monkeypatch.setattr(exchange_module, "WATCH_AFTER_S", 3600.0)
    script = always(Pause(0.15), TextDelta(0, "a"), Pause(0.05), TextDelta(0, "b"), HANG)
    request = asyncio.ensure_future(one(ScriptedAdapter("b1", script), chat(stream=False), leave_after=0.3))
    await asyncio.sleep(0.05)
    monkeypatch.setattr(exchange_module, "WATCH_AFTER_S", 0.0)
    served = await asyncio.wait_for(request, timeout=10)
    assert (served.outcome.status, served.outcome.cancelled_phase) == (499, CancelPhase.NON_STREAMING)
    assert served.receives == 1


async def test_a_whole_answer_over_before_the_threshold_starts_no_watcher(monkeypatch):
    # The watcher is the only per-request task: an answer done before WATCH_AFTER_S
    # must not have started one, from its events or otherwise.
    monkeypatch.setattr(exchange_module, "WATCH_AFTER_S", 5.0)
    served = await one(ScriptedAdapter("b1", answered), chat(stream=False))
    assert served.outcome.status == 200 and served.receives == 0


# ---- a bug --------------------------------------------------------------------------------------------


async def test_a_bug_is_an_internal_error_that_names_no_detail_and_is_recorded():
    served = await one(Broken(0), chat(stream=False))
    error = orjson.loads(served.body)["error"]
    assert served.start["status"] == 500 and error["code"] == "internal_error"
    assert "internal error" in error["message"] and "a bug" not in error["message"]
    assert (served.outcome.status, served.outcome.error) == (500, error["message"])


async def test_a_bug_mid_stream_is_recorded_as_an_internal_error():
    served = Served()
    with pytest.raises(RuntimeError, match="a bug"):
        await one(Broken(2), chat(), served=served)
    assert served.outcome.status == 500 and "internal error" in (served.outcome.error or "")
