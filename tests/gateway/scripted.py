"""A real `Adapter` whose answers are scripted, and the backends around it, for
in-process tests of the dispatcher and the generation (no network, no process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from adapters.base import Adapter, Capabilities, Event, GenerationRequest, Health, Usage
from adapters.errors import GatewayError
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config
from gateway.protection.gate import Ticket
from gateway.serving.phases import CancelPhase

HANG = "hang"  # in a script: wait until cancelled


async def pause(seconds: float) -> None:
    """How a script's Pause waits: real time, unless a ScriptClock stands in for it."""
    await asyncio.sleep(seconds)


class _Overriding:
    """A module with some of its functions replaced (the rest read through)."""

    def __init__(self, module: Any, **functions: Any) -> None:
        self._module = module
        self.__dict__.update(functions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


class ScriptClock:
    """Time moved by hand for in-process serving tests, so that a duration is asserted
    exactly whatever the machine's load: the dispatcher's retry backoffs and the scripts'
    Pauses record what they ask (`slept`), move `now` by it and return at once; the
    generation's stopwatch (time.perf_counter) reads `now`. The event loop's own clock
    (deadlines, the disconnect watcher's timer) stays real."""

    def __init__(self, monkeypatch: Any) -> None:
        import sys
        import time

        from gateway.serving import dispatch, generation

        self.now = 1000.0
        self.slept: list[float] = []
        monkeypatch.setattr(dispatch, "asyncio", _Overriding(asyncio, sleep=self.sleep))
        monkeypatch.setattr(generation, "time", _Overriding(time, perf_counter=lambda: self.now))
        monkeypatch.setattr(sys.modules[__name__], "pause", self.sleep)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        self.slept.append(delay)
        self.now += delay
        await _real_sleep(0)  # still a point where other tasks run
        return result


_real_sleep = asyncio.sleep


@dataclass(frozen=True)
class Pause:
    """In a script: the upstream takes this long before its next item."""

    seconds: float


Script = Callable[[GenerationRequest], list[Any]]


class ScriptedAdapter(Adapter):
    """Each `generate` call plays the script for its request: events are yielded, a
    `GatewayError` is raised where it stands, a `Pause` sleeps, `HANG` waits until
    the stream is closed or cancelled, a callable is called and awaited (a wait on
    something). Records what it was asked, how many streams ended and how many ran at once."""

    runtime = "scripted"

    def __init__(self, name: str, script: Script, *, n: bool = True) -> None:
        super().__init__(name)
        self.capabilities = Capabilities(n=n)
        self.script = script
        self.requests: list[GenerationRequest] = []
        self.called = asyncio.Event()
        self.ended = 0  # streams whose generator finished, however
        self.active = 0
        self.max_active = 0  # the most streams open at once

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        self.called.set()
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            for item in self.script(request):
                if isinstance(item, GatewayError):
                    raise item
                if isinstance(item, Pause):
                    await pause(item.seconds)
                    continue
                if item == HANG:
                    await asyncio.sleep(3600)
                    continue
                if callable(item):
                    await item()
                    continue
                yield item
        finally:
            self.active -= 1
            self.ended += 1

    async def health(self) -> Health:
        return Health(True, "scripted")

    async def models(self) -> list[str]:
        return []


def backend_set(models: dict[str, dict[str, Any]], adapters: dict[str, ScriptedAdapter]) -> BackendSet:
    """Backends for `models` (model name -> its config with backend names listed
    under "backends"), each served by its scripted adapter."""
    config = {
        name: {
            **cfg,
            "backends": [{"name": b, "adapter": "openai", "url": "http://127.0.0.1:9/v1"} for b in cfg["backends"]],
        }
        for name, cfg in models.items()
    }
    backends = BackendSet(parse_config({"models": config}))
    for name, adapter in adapters.items():
        backends.backends[name].adapter = adapter
    return backends


def always(*items: Any) -> Script:
    return lambda request: list(items)


def count_releases(ticket: Ticket, releases: list[tuple[Usage | None, CancelPhase | None]]) -> None:
    """Has `ticket` note each release's (usage, phase) in `releases` before releasing:
    a test sees every release the code under test asks for, repeated ones included."""
    release = ticket.release

    async def counted_release(usage: Usage | None, phase: CancelPhase | None = None) -> None:
        releases.append((usage, phase))
        await release(usage, phase)

    ticket.release = counted_release  # type: ignore[method-assign]
