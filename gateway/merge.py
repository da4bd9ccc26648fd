"""Several event streams as one: the sub-requests of an n > 1 fan-out, or the
prompts of a batched legacy completion, with dense choice indices and one usage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable

from adapters.base import ErrorEvent, Event, Usage

_END = object()


class Merged:
    """Interleaves `subs` as their events arrive, shifting each one's choice indices
    by its offset, and sums their usage into one `Usage` at the end: the prompt once
    when every sub-stream read the same prompt (`prompt_counted_once`), summed when
    they read different ones. A sub-stream's error event ends the stream; what a
    sub-stream raised is raised here. `aclose` closes every sub-stream, started or not."""

    def __init__(self, subs: list[tuple[int, AsyncIterable[Event]]], prompt_counted_once: bool) -> None:
        self.subs = subs
        self.prompt_counted_once = prompt_counted_once
        self.queue: asyncio.Queue = asyncio.Queue()
        self.tasks: list[asyncio.Task] = []
        self.remaining = len(subs)
        self.prompt = self.completion = 0
        self.cached: int | None = None
        self.saw_usage = False
        self.closed = False

    def __aiter__(self) -> Merged:
        return self

    async def _pump(self, offset: int, events: AsyncIterable[Event]) -> None:
        try:
            async for ev in events:
                await self.queue.put((offset, ev))
        except Exception as exc:
            await self.queue.put((offset, exc))
        finally:
            await self.queue.put((offset, _END))

    async def __anext__(self) -> Event:
        if not self.tasks and not self.closed:
            self.tasks = [asyncio.create_task(self._pump(off, ev)) for off, ev in self.subs]
        while self.remaining:
            offset, ev = await self.queue.get()
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
                ev.index += offset
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
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(ev.aclose() for _, ev in self.subs), return_exceptions=True)  # type: ignore[attr-defined]


def merge(subs: list[tuple[int, AsyncIterable[Event]]], prompt_counted_once: bool) -> Merged:
    return Merged(subs, prompt_counted_once)
