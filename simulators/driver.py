"""One generation on the wire: what a runtime module writes (`Reply`), and how the
shared skeleton drives it (`pump` for streams, `collect` for whole answers).

A runtime module says how it answers one request by subclassing `Reply`: the body of
a whole answer, the frames of a stream (`opening`, `emit` per token, `closing`), and
what a failed generation looks like. `Simulator.run_generation` (server.py) does the
rest the same way for every runtime: bookkeeping, disconnects, the stream faults
`error_after` / `cut_after` (counted in frames written by `emit`) and `no_done`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from aiohttp import web

from simulators.faults import Faults
from simulators.request import SimRequest
from simulators.sse import DONE_FRAME, SSEStream
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


def cut_connection(request: web.Request) -> web.Response:
    """A non-streamed answer cut off: the connection closes before any response."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=500)


class Reply:
    """How one runtime answers one generation request. Subclasses write the shapes;
    the defaults are what most runtimes do."""

    # Extra headers of the stream response.
    headers: dict[str, str] | None = None
    # Whether a stream ends with `data: [DONE]`, also after an in-stream error event.
    done = True

    def answer(self, outcome: Outcome) -> web.Response:
        """The whole answer of a non-streamed request."""
        raise NotImplementedError

    def error_answer(self) -> web.Response:
        """The answer of a non-streamed generation that failed in the engine."""
        raise NotImplementedError

    def failed_answer(self, request: web.Request, faults: Faults) -> web.Response | None:
        """What a fault makes of a non-streamed answer; None: it is answered normally."""
        if faults.error_after is not None:
            return self.error_answer()
        if faults.cut_after is not None:
            return cut_connection(request)
        return None

    def opening(self, outcome: Outcome) -> list[bytes]:
        """Frames written with the first token, before its own (vLLM's and trtllm-serve's
        role chunk: their generators write it in the first pass over the engine's
        outputs, so after the prefill). They do not count towards the stream faults."""
        return []

    def emit(self, token: Token, outcome: Outcome) -> list[bytes]:
        """The frames one token becomes (`outcome` already includes it)."""
        raise NotImplementedError

    def closing(self, outcome: Outcome) -> list[bytes]:
        """Frames after the last token, before [DONE]."""
        return []

    def error_event(self) -> bytes | None:
        """The in-stream error event of a failed generation; None: the runtime cuts the connection."""
        raise NotImplementedError


class StreamEnded(Exception):
    """A fault ended the stream; the response has been written (or cut)."""


async def fail(stream: SSEStream, reply: Reply) -> None:
    event = reply.error_event()
    if event is None:
        await stream.cut()
        return
    await stream.send(event)
    if reply.done:
        await stream.send(DONE_FRAME)
    await stream.finish()


async def pump(sim: SimRequest, gen: Generation, stream: SSEStream, reply: Reply, outcome: Outcome) -> Outcome:
    faults = sim.faults
    frames_sent = 0
    if faults.error_after == 0:  # the engine fails the request before its first token
        await fail(stream, reply)
        raise StreamEnded()
    opened = False
    async for token in gen:
        if not opened:  # written as the runtime writes them: before the token is counted
            opened = True
            for data in reply.opening(outcome):
                await stream.send(data)
        outcome.add(token)
        for data in reply.emit(token, outcome):
            await stream.send(data)
            frames_sent += 1
            if faults.error_after is not None and frames_sent >= faults.error_after:
                await fail(stream, reply)
                raise StreamEnded()
            if faults.cut_after is not None and frames_sent >= faults.cut_after:
                await stream.cut()
                raise StreamEnded()
    if faults.error_after is not None and frames_sent < faults.error_after:
        await fail(stream, reply)  # shorter than K frames: fail at the end, before the closing frames
        raise StreamEnded()
    return outcome


async def collect(gen: Generation, outcome: Outcome) -> Outcome:
    async for token in gen:
        outcome.add(token)
    return outcome
