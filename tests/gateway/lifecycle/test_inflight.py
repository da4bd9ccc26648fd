"""The requests under way (gateway/lifecycle/inflight.py) on their own: how far an answer got
as its messages pass, how a cut request is answered at each of those points, the oldest config
version still in use, the wait for none to be left, and the cut itself."""

from __future__ import annotations

import asyncio

import pytest

from adapters.errors import GatewayError
from gateway.http.envelope import error_response
from gateway.lifecycle.inflight import Exchange, InFlight
from gateway.openai.encoder import sse_error

ERR = GatewayError(503, "shutting down", code="gateway_shutting_down", retry_after=1)


class Sent:
    def __init__(self) -> None:
        self.messages: list[dict] = []

    async def __call__(self, message: dict) -> None:
        self.messages.append(message)


async def exchange_with(sent: Sent) -> Exchange:
    task = asyncio.current_task()
    assert task is not None
    return Exchange(task, 3, sent)


def start(content_type: bytes, name: bytes = b"content-type") -> dict:
    return {"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1"), (name, content_type)]}


async def test_an_exchange_notes_how_far_its_answer_got():
    sent = Sent()
    ex = await exchange_with(sent)
    assert (ex.version, ex.cut, ex.on_cut, ex.started, ex.streaming, ex.complete) == (
        3,
        False,
        None,
        False,
        False,
        False,
    )
    await ex.send(start(b"text/event-stream; charset=utf-8"))
    assert ex.started and ex.streaming and not ex.complete
    await ex.send({"type": "http.response.body", "body": b"a", "more_body": True})
    assert not ex.complete
    await ex.send({"type": "http.response.body", "body": b"b"})
    assert ex.complete
    assert [m.get("body") for m in sent.messages] == [None, b"a", b"b"]  # each message passed on as it came


@pytest.mark.parametrize(
    "header, streaming",
    [
        ((b"text/event-stream", b"content-type"), True),
        ((b"application/json", b"content-type"), False),
        ((b"text/event-stream", b"x-content-type"), False),  # the value under another name
        ((b"text/plain; text/event-stream", b"content-type"), False),  # the type itself, not a mention
    ],
)
async def test_a_stream_is_known_by_its_content_type(header, streaming):
    ex = await exchange_with(Sent())
    await ex.send(start(*header))
    assert ex.started and ex.streaming is streaming
    await ex.send({"type": "http.response.body", "body": b"", "more_body": False})
    assert ex.complete


async def test_a_cut_request_before_its_answer_gets_the_error_response():
    sent = Sent()
    ex = await exchange_with(sent)
    assert await ex.end_cut(ERR) is True
    expected = error_response(ERR)
    assert sent.messages == [
        {"type": "http.response.start", "status": 503, "headers": expected.raw_headers},
        {"type": "http.response.body", "body": expected.body},
    ]


async def test_a_cut_stream_gets_an_error_event_and_its_end():
    sent = Sent()
    ex = await exchange_with(sent)
    await ex.send(start(b"text/event-stream"))
    assert await ex.end_cut(ERR) is True
    assert sent.messages[-1] == {"type": "http.response.body", "body": sse_error(ERR), "more_body": False}


async def test_a_cut_whole_answer_under_way_cannot_be_ended_and_a_complete_one_needs_nothing():
    sent = Sent()
    ex = await exchange_with(sent)
    await ex.send(start(b"application/json"))
    assert await ex.end_cut(ERR) is False and len(sent.messages) == 1
    await ex.send({"type": "http.response.body", "body": b"{}"})
    assert await ex.end_cut(ERR) is True and len(sent.messages) == 2
    streamed = Sent()
    done = await exchange_with(streamed)
    await done.send(start(b"text/event-stream"))
    await done.send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
    assert await done.end_cut(ERR) is True and len(streamed.messages) == 2


async def test_the_oldest_version_and_leaving():
    inflight = InFlight()
    assert len(inflight) == 0 and inflight.oldest_version() is None
    gate = asyncio.Event()
    exchanges: dict[int, Exchange] = {}

    async def request(version: int) -> None:
        exchanges[version] = inflight.enter(version, Sent())
        await gate.wait()

    tasks = [asyncio.create_task(request(v)) for v in (5, 2, 9)]
    await asyncio.sleep(0)
    assert len(inflight) == 3 and inflight.oldest_version() == 2
    assert exchanges[5].task is tasks[0] and exchanges[5].version == 5
    inflight.leave(exchanges[2])
    inflight.leave(exchanges[2])  # twice: nothing more happens
    assert len(inflight) == 2 and inflight.oldest_version() == 5
    gate.set()
    await asyncio.gather(*tasks)


async def test_waiting_for_no_request_left():
    inflight = InFlight()
    assert await inflight.wait_empty(0) is True  # none under way: at once
    ex = inflight.enter(1, Sent())
    assert await inflight.wait_empty(0.05) is False
    asyncio.get_running_loop().call_later(0.05, inflight.leave, ex)
    assert await inflight.wait_empty(5) is True and len(inflight) == 0
    # one of two leaving is not empty (each request is its own task)
    gates = [asyncio.Event(), asyncio.Event()]

    async def request(gate: asyncio.Event) -> None:
        ex = inflight.enter(1, Sent())
        await gate.wait()
        inflight.leave(ex)

    tasks = [asyncio.create_task(request(g)) for g in gates]
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_later(0.02, gates[0].set)
    assert await inflight.wait_empty(0.2) is False and len(inflight) == 1
    gates[1].set()
    await asyncio.gather(*tasks)
    # the wait starts anew each time: an earlier emptying does not answer a later wait
    ex = inflight.enter(1, Sent())
    assert await inflight.wait_empty(0.05) is False
    inflight.leave(ex)


async def test_a_wait_that_times_out_as_the_last_request_leaves_says_so():
    inflight = InFlight()
    ex = inflight.enter(1, Sent())

    class Late(asyncio.Event):
        async def wait(self) -> bool:
            inflight._live.pop(ex.task)  # gone, but the event not set: the timeout strikes first
            await asyncio.sleep(1)
            return True

    inflight._emptied = Late()
    assert await inflight.wait_empty(0.01) is True


async def test_a_wait_cancelled_as_the_last_request_leaves_is_cancelled():
    # The drain waits here; closing the process cancels it. A cancel that lands as the last
    # request leaves must hold, not come back as "none left" (the drain would go on as drained).
    inflight = InFlight()
    ex = inflight.enter(1, Sent())
    waiting = asyncio.create_task(inflight.wait_empty(60))
    for _ in range(3):
        await asyncio.sleep(0)  # the wait is on the event
    inflight.leave(ex)  # the event is set and the cancel lands in the same loop iteration
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def stubborn(inflight: InFlight, gate: asyncio.Event) -> None:
    """A request that does not let go when cancelled (until `gate`)."""
    ex = inflight.enter(2, Sent())
    while not gate.is_set():
        try:
            await gate.wait()
        except asyncio.CancelledError:
            assert ex.cut
    inflight.leave(ex)


async def test_a_cut_marks_tells_and_cancels_every_request_and_waits_for_them():
    inflight = InFlight()
    order: list[str] = []

    async def request(name: str) -> None:
        ex = inflight.enter(1, Sent())
        ex.on_cut = lambda: order.append(f"told {name} cut={ex.cut} cancelling={ex.task.cancelling()}")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            order.append(f"cancelled {name}")
            await asyncio.sleep(0.02)  # answering takes a moment: the cut waits for it
            raise
        finally:
            inflight.leave(ex)

    tasks = [asyncio.create_task(request(n)) for n in ("a", "b")]
    await asyncio.sleep(0)
    assert await inflight.cut(settle_s=5) == 2
    assert order == ["told a cut=True cancelling=0", "told b cut=True cancelling=0", "cancelled a", "cancelled b"]
    assert len(inflight) == 0 and all(t.done() for t in tasks)


async def test_a_cut_waits_no_longer_than_its_settle_time_five_seconds_by_default():
    inflight = InFlight()
    gate = asyncio.Event()
    task = asyncio.create_task(stubborn(inflight, gate))  # no on_cut: cancelled all the same
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await inflight.cut(settle_s=0.05) == 1
    assert 0.04 < loop.time() - began < 3 and len(inflight) == 1
    waits: list[float] = []

    async def wait_empty(timeout_s: float) -> bool:
        waits.append(timeout_s)
        return False

    inflight.wait_empty = wait_empty  # type: ignore[method-assign]
    assert await inflight.cut() == 1 and waits == [5.0]
    gate.set()
    await task
    assert len(inflight) == 0 and await InFlight().cut() == 0
