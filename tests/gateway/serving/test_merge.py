"""gateway/serving/merge.py on its own: closing a sub-stream that is being read ahead
stops its reader and closes its iterator, closing the merge closes every sub-stream
even when one of them fails to close, and a merge whose sub-streams sent no usage
invents none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from adapters.base import Event, Finish, TextDelta, Usage
from gateway.serving.merge import Merged, SubStream


class Upstream:
    """A sub-request's events: `events`, then (with `hang`) waits until closed. Records
    whether its iterator was closed; `fail_close` makes its cleanup raise, as an
    upstream connection torn down badly would."""

    def __init__(self, events: list[Event], *, hang: bool = False, fail_close: bool = False) -> None:
        self.events, self.hang, self.fail_close = events, hang, fail_close
        self.started = asyncio.Event()
        self.closed = False

    async def run(self) -> AsyncIterator[Event]:
        try:
            for event in self.events:
                yield event
            self.started.set()
            if self.hang:
                await asyncio.Event().wait()
        finally:
            self.closed = True
            if self.fail_close:
                raise RuntimeError("connection torn down badly")


async def test_closing_a_sub_stream_being_read_ahead_stops_its_reader_and_closes_its_upstream() -> None:
    up = Upstream([TextDelta(0, "a")], hang=True)
    sub = SubStream(0, up.run())
    sink: asyncio.Queue = asyncio.Queue()
    sub.forward(sink)
    assert sub.forwarding
    await asyncio.wait_for(up.started.wait(), 10)
    await sub.aclose()  # neither the reader's cancellation nor a running iterator escapes
    assert up.closed and sub.closed
    queued = [sink.get_nowait() for _ in range(sink.qsize())]
    assert [ev for _, ev in queued][0] == TextDelta(0, "a") and len(queued) == 2  # the event, then the end
    await sub.aclose()  # a second close is a no-op


async def test_closing_a_sub_stream_never_read_ahead_closes_its_upstream() -> None:
    up = Upstream([TextDelta(0, "a")])
    gen = up.run()
    await gen.__anext__()  # started, as a sub-request whose first event was read
    sub = SubStream(0, gen)
    assert not sub.forwarding
    await sub.aclose()
    assert up.closed


async def test_closing_the_merge_closes_every_sub_stream_even_when_one_fails_to_close() -> None:
    bad = Upstream([TextDelta(0, "a")], hang=True, fail_close=True)
    good = Upstream([TextDelta(0, "b")], hang=True)
    sink: asyncio.Queue = asyncio.Queue()
    subs = [SubStream(0, bad.run()), SubStream(1, good.run())]
    for sub in subs:
        sub.forward(sink)
    merged = Merged(subs, sink, prompt_counted_once=True)
    await asyncio.wait_for(asyncio.gather(bad.started.wait(), good.started.wait()), 10)
    await merged.aclose()  # one sub-stream's failure to close does not escape nor stop the other's
    assert bad.closed and good.closed and all(sub.closed for sub in subs)


async def test_a_merge_without_usage_from_its_sub_streams_ends_without_one() -> None:
    sink: asyncio.Queue = asyncio.Queue()
    ups = [Upstream([TextDelta(0, "a"), Finish(0, "stop")]), Upstream([TextDelta(0, "b"), Finish(0, "stop")])]
    subs = [SubStream(i, up.run()) for i, up in enumerate(ups)]
    for sub in subs:
        sub.forward(sink)
    events = [e async for e in Merged(subs, sink, prompt_counted_once=True)]
    assert not any(isinstance(e, Usage) for e in events)
    assert sorted((e.index, type(e).__name__) for e in events) == [
        (0, "Finish"),
        (0, "TextDelta"),
        (1, "Finish"),
        (1, "TextDelta"),
    ]
    assert all(up.closed for up in ups)  # the merge's end closed them
