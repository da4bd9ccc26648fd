"""Several event streams as one: the sub-requests of an n > 1 fan-out, or the
prompts of a batched legacy completion, with dense choice indices and one usage.

Each sub-stream is read ahead into the merge's queue from the moment it started
(`SubStream.forward`), not only once every sibling has started and the client
reads: a sub-request that finishes early gives its upstream connection back at
once, so the sub-requests of one request never wait on each other for the
backend's connections (one request with more sub-requests than the pool has
connections, or two such requests at once, would otherwise wedge the pool).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from adapters.base import ErrorEvent, Event, Usage

_END = object()

# What the merge's queue holds: (the sub-stream, an event, an exception it raised, or _END).
Sink = asyncio.Queue


class SubStream:
    """One sub-stream of a merged request: its events (with `first`, already read,
    ahead of the rest) shifted by `offset` choices. `forward` starts reading it
    into a merge's queue (`Sink`); `aclose` stops that and closes the iterator
    (aborting the upstream work), whether it was read or not."""

    def __init__(self, offset: int, agen: AsyncIterator[Event], first: Event | None = None) -> None:
        self.offset = offset
        self.agen = agen
        self.first = first
        self.closed = False
        self._reader: asyncio.Task | None = None

    def forward(self, sink: Sink) -> None:
        self._reader = asyncio.create_task(self._read_into(sink))

    @property
    def forwarding(self) -> bool:
        return self._reader is not None

    async def _read_into(self, sink: Sink) -> None:
        try:
            if self.first is not None:
                sink.put_nowait((self, self.first))
            async for event in self.agen:
                sink.put_nowait((self, event))
        except Exception as exc:
            sink.put_nowait((self, exc))
        finally:
            sink.put_nowait((self, _END))

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._reader is not None:
            # Cancelling the reader inside the iterator runs the iterator's own
            # cleanup; the aclose after it finds it closed.
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        await self.agen.aclose()  # type: ignore[attr-defined]


class Merged:
    """Interleaves `subs` (each forwarding into `sink`) as their events arrive,
    shifting each one's choice indices by its offset, and sums their usage into
    one `Usage` at the end: the prompt once when every sub-stream read the same
    prompt (`prompt_counted_once`), summed when they read different ones. A
    sub-stream's error event ends the stream; what a sub-stream raised is raised
    here. What the sink holds from sub-streams not in `subs` (closed when their
    start failed over elsewhere) is skipped. `aclose` closes every sub-stream."""

    def __init__(self, subs: Sequence[SubStream], sink: Sink, prompt_counted_once: bool) -> None:
        self.subs = list(subs)
        self.sink = sink
        self.prompt_counted_once = prompt_counted_once
        self.remaining = len(subs)
        self.prompt = self.completion = 0
        self.cached: int | None = None
        self.saw_usage = False
        self.closed = False

    def __aiter__(self) -> Merged:
        return self

    async def __anext__(self) -> Event:
        while self.remaining:
            sub, ev = await self.sink.get()
            if sub.closed:
                continue
            if ev is _END:
                self.remaining -= 1
            elif isinstance(ev, Usage):
                self._add(ev)
            elif isinstance(ev, ErrorEvent):
                self._stop()
                return ev
            elif isinstance(ev, Exception):
                self._stop()
                raise ev
            else:
                ev.index += sub.offset
                return ev
        if self.saw_usage:
            self.saw_usage = False
            return Usage(self.prompt, self.completion, self.cached)
        await self.aclose()
        raise StopAsyncIteration

    def _stop(self) -> None:
        """A sub-stream failed: nothing more is read, and no usage follows."""
        self.remaining = 0
        self.saw_usage = False

    def _add(self, usage: Usage) -> None:
        self.saw_usage = True
        once = self.prompt_counted_once
        self.prompt = max(self.prompt, usage.prompt_tokens) if once else self.prompt + usage.prompt_tokens
        self.completion += usage.completion_tokens
        if usage.cached_tokens is not None:
            held = self.cached or 0
            self.cached = max(held, usage.cached_tokens) if once else held + usage.cached_tokens

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        await asyncio.gather(*(sub.aclose() for sub in self.subs), return_exceptions=True)
