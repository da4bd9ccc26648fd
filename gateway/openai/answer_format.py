"""How a generation's canonical events are spoken to the client: the strategy
`Generation` (gateway/serving/generation.py) runs with, for a stream (server-sent-event
bytes) and for a whole answer (one JSON object). `ChatAnswer` (here) serves chat and
legacy completions; `ResponsesAnswer` (gateway/openai/responses/answer.py) the Responses
API. A whole answer that fails raises `GatewayError` (nothing was sent yet: the client
gets the error envelope); a stream reports a failure in its own frames.
"""

from __future__ import annotations

from typing import Any, Protocol

from adapters.base import Event, GenerationRequest, Usage
from gateway.openai.encoder import ResponseBuilder, StreamEncoder


class AnswerFormat(Protocol):
    response_id: str  # the answer's id (what the access log and the trace name)

    def stream_start(self) -> bytes:
        """The frames sent with the headers, before any event."""
        ...

    def stream_feed(self, event: Event) -> bytes: ...

    async def stream_end(self, usage: Usage | None) -> bytes:
        """The last frames, once the events ended; `usage`: the runtime's, else what the
        gateway counted (None: nothing was seen)."""
        ...

    def whole_feed(self, event: Event) -> None:
        """Raises GatewayError when the answer failed (nothing was sent yet)."""
        ...

    async def whole_body(self, usage: Usage) -> dict[str, Any]:
        """The answer, once the events ended; `usage`: the runtime's, else what the gateway counted."""
        ...


class ChatAnswer:
    """`chat.completion` / `text_completion` objects and their chunk streams. Only
    the encoder the request needs is built (this is on the measured hot path)."""

    __slots__ = ("response_id", "created", "model", "n", "chat", "first", "fingerprint", "_stream", "_whole")

    def __init__(
        self, first: GenerationRequest, created: int, n: int, chat: bool, fingerprint: str | None = None
    ) -> None:
        prefix = "chatcmpl-" if chat else "cmpl-"
        # From the gateway's own id (32 hex characters; a batch's prompts add "-i"),
        # never the client's x-request-id, which another tenant may send too.
        self.response_id = prefix + first.request_id.replace("-", "")[:32]
        self.created = created
        self.model = first.model
        self.n = n
        self.chat = chat
        self.first = first
        self.fingerprint = fingerprint  # the serving pool's (gateway/backends/pool.py)
        self._stream: StreamEncoder | None = None
        self._whole: ResponseBuilder | None = None

    def stream_start(self) -> bytes:
        self._stream = StreamEncoder(
            self.response_id,
            self.created,
            self.model,
            self.n,
            chat=self.chat,
            include_usage=self.first.include_usage,
            logprobs=self.first.sampling.logprobs,
            fingerprint=self.fingerprint,
        )
        return b""

    def stream_feed(self, event: Event) -> bytes:
        assert self._stream is not None
        return self._stream.feed(event)

    async def stream_end(self, usage: Usage | None) -> bytes:
        assert self._stream is not None  # the usage chunk is the runtime's own (stream_options)
        return self._stream.close()

    def whole_feed(self, event: Event) -> None:
        (self._whole or self._builder()).feed(event)

    async def whole_body(self, usage: Usage) -> dict[str, Any]:
        return (self._whole or self._builder()).build(usage)

    def _builder(self) -> ResponseBuilder:
        self._whole = ResponseBuilder(
            self.response_id,
            self.created,
            self.model,
            self.n,
            chat=self.chat,
            logprobs=self.first.sampling.logprobs,
            fingerprint=self.fingerprint,
        )
        return self._whole
