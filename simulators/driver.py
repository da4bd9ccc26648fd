"""Running one generation and applying the stream faults, shared by all runtimes.

A runtime module supplies how a token becomes frames (`emit`) and how an
in-stream error looks (`fail`); `pump` feeds tokens through them and applies
`error_after` / `cut_after` (counted in content frames), and `collect` runs a
non-streaming generation.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from simulators.request import SimRequest
from simulators.server import SSEStream
from simulators.tokens import Generation, Token


@dataclass(slots=True)
class Outcome:
    n: int
    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    texts: list[list[str]] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    finish: list[str | None] = field(default_factory=list)
    matched: list[str | int | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.texts = [[] for _ in range(self.n)]
        self.token_ids = [[] for _ in range(self.n)]
        self.counts = [0] * self.n
        self.finish = [None] * self.n
        self.matched = [None] * self.n

    def add(self, token: Token) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        i = token.index
        self.texts[i].append(token.text)
        self.token_ids[i].append(token.token_id)
        if token.finish != "abort":
            self.counts[i] += 1
        if token.finish:
            self.finish[i] = token.finish
            self.matched[i] = token.matched

    def text(self, i: int) -> str:
        return "".join(self.texts[i])

    @property
    def completion_tokens(self) -> int:
        return sum(self.counts)

    @property
    def main_finish(self) -> str | None:
        return self.finish[0] if self.finish else None


class StreamEnded(Exception):
    """A fault ended the stream; the response has been written (or cut)."""


Emit = Callable[[Token], list[bytes]]
Fail = Callable[[SSEStream], Awaitable[None]]


async def pump(
    sim: SimRequest, gen: Generation, stream: SSEStream, emit: Emit, fail: Fail, outcome: Outcome
) -> Outcome:
    faults = sim.faults
    frames_sent = 0
    async for token in gen:
        outcome.add(token)
        for data in emit(token):
            await stream.send(data)
            frames_sent += 1
            if faults.error_after is not None and frames_sent >= faults.error_after:
                await fail(stream)
                raise StreamEnded()
            if faults.cut_after is not None and frames_sent >= faults.cut_after:
                await stream.cut()
                raise StreamEnded()
    if faults.error_after is not None and frames_sent < faults.error_after:
        await fail(stream)  # shorter than K chunks: fail at the end, before the finish frames
        raise StreamEnded()
    return outcome


async def collect(gen: Generation, outcome: Outcome) -> Outcome:
    async for token in gen:
        outcome.add(token)
    return outcome
