"""The Responses API as an answer format of the gateway's one generation path
(`AnswerFormat`, gateway/openai/answer_format.py): canonical events -> the `response`
object or its event stream, the finished response stored before its terminal event is
sent (never one the client left). What the finish causes goes out with the terminal
event, one write fewer (docs/architecture.md, "The Responses API").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from adapters.base import Event, Finish, Usage
from gateway.openai.responses.encoder import ResponseAssembly, ResponseStreamEncoder
from gateway.openai.responses.handlers import PreparedResponse, store_answer
from gateway.openai.responses.store import ResponseStore


class ResponsesAnswer:
    def __init__(
        self, prepared: PreparedResponse, store: ResponseStore, not_stored: Callable[[str], None] | None = None
    ) -> None:
        """`not_stored`: called with the error's code when a finished answer could not
        be stored (it is delivered all the same: handlers.py `store_answer`)."""
        self.prepared = prepared
        self.store = store
        self.not_stored = not_stored
        self.response_id = prepared.shell.id
        self.assembly = ResponseAssembly(prepared.shell, logprobs=prepared.request.logprobs)
        self.encoder = ResponseStreamEncoder(self.assembly)
        self.state = self.assembly.state
        self.held = b""  # frames caused once the generation finished: sent with the terminal ones
        self.opening: bytes | None = None
        if prepared.request.stream:
            # The opening frames depend only on the request: built while it waits on its
            # upstream, not before the first byte (stream_start builds them if no turn came).
            try:
                asyncio.get_running_loop().call_soon(self._build_opening)
            except RuntimeError:  # no running loop (a synchronous caller)
                pass

    # ---- stream ---------------------------------------------------------------------

    def _build_opening(self) -> None:
        if self.opening is None:
            self.opening = self.encoder.start()

    def stream_start(self) -> bytes:
        self._build_opening()
        return self.opening  # type: ignore[return-value]  # just built

    def stream_feed(self, event: Event) -> bytes:
        state = self.state
        if state.more_text(event):  # the common event, on the shortest path (a measured one)
            return self.encoder.text_delta(state.open, event.text)  # type: ignore[arg-type]  # open: set
        frames = self._frames(event)
        if state.finished or self.held:
            self.held += frames  # in order, ahead of the terminal frames (module docstring)
            return b""
        return frames

    def _frames(self, event: Event) -> bytes:
        state = self.state
        if not state.want_logprobs and self.assembly.error is None:
            # A message's opening and its finish, from templates (no logprobs to write).
            if state.open is None and state.take_text(event):
                return self.encoder.message_opened(state.open, event.text)  # type: ignore[arg-type]
            index = state.open
            if type(event) is Finish and state.open_text is not None and state.finish_quietly(event):
                return self.encoder.message_closed(index)  # type: ignore[arg-type]
        return self.encoder.feed(event)

    async def stream_end(self, usage: Usage | None) -> bytes:
        held, self.held = self.held, b""
        return held + await self._terminal(usage)

    async def _terminal(self, usage: Usage | None) -> bytes:
        if self.assembly.state.usage is None:
            self.assembly.state.usage = usage  # the runtime sent none: what the gateway counted
        if not self.prepared.request.store:
            return self.encoder.terminal()  # serialized from the state: no object to build
        final = self.assembly.result()
        await self._store(final)
        return self.encoder.terminal(final)

    # ---- whole ---------------------------------------------------------------------------

    def whole_feed(self, event: Event) -> None:
        state = self.state
        if state.take_text(event):
            return  # nothing can fail here, and a whole answer needs no event payload
        if type(event) is Finish and self.assembly.error is None and state.finish_quietly(event):
            return  # the finish closes the open item; its event payloads would be dropped
        self.assembly.feed(event)
        if self.assembly.error is not None:
            raise self.assembly.error

    async def whole_body(self, usage: Usage) -> dict[str, Any]:
        if self.assembly.error is not None:
            raise self.assembly.error
        if self.assembly.state.usage is None:
            self.assembly.state.usage = usage  # the runtime sent none: what the gateway counted
        final = self.assembly.result()
        await self._store(final)
        return final

    async def _store(self, final: dict[str, Any]) -> None:
        err = await store_answer(self.store, self.prepared, final)
        if err is not None and self.not_stored is not None:
            self.not_stored(err.code or "error")
