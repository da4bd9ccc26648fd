"""A scripted `Runner` for the handlers: canned canonical events per call, and a
record of what it was asked to generate and whether its events were closed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from adapters.base import Event, GenerationRequest
from adapters.errors import GatewayError


class ScriptedEvents:
    """An opened generation: yields its script (raising any GatewayError in it) and
    records its closing, which must happen whether or not it was ever read."""

    def __init__(self, script: list[Event | GatewayError], hold: asyncio.Event | None) -> None:
        self.script = list(script)
        self.hold = hold
        self.sent = 0
        self.closed = False

    def __aiter__(self) -> ScriptedEvents:
        return self

    async def __anext__(self) -> Event:
        if self.closed or self.sent >= len(self.script):
            raise StopAsyncIteration
        if self.sent == 1 and self.hold is not None:
            await self.hold.wait()
        item = self.script[self.sent]
        self.sent += 1
        if isinstance(item, GatewayError):
            raise item
        return item

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class ScriptedRunner:
    scripts: list[list[Event | GatewayError]]
    requests: list[GenerationRequest] = field(default_factory=list)
    opened: list[ScriptedEvents] = field(default_factory=list)
    fail_to_open: GatewayError | None = None
    hold: asyncio.Event | None = None  # when given, the events wait for it after the first one

    async def __call__(self, request: GenerationRequest) -> ScriptedEvents:
        if self.fail_to_open is not None:
            raise self.fail_to_open
        self.requests.append(request)
        events = ScriptedEvents(self.scripts[min(len(self.requests), len(self.scripts)) - 1], self.hold)
        self.opened.append(events)
        return events

    @property
    def closed(self) -> list[bool]:
        return [e.closed for e in self.opened]
