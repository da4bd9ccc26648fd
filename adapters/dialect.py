"""What a runtime says differently on the wire: the dialect interface of `HTTPAdapter`.

An HTTP adapter is a transport (adapters/transport.py: pool, reads, timeouts, abort
tasks) and one dialect: how requests are written, how answers and errors are read,
how load, health and the one-shot calls are asked for. `OpenAIDialect`
(adapters/openai.py) is the base; each runtime's dialect overrides what its runtime
says differently, and is tested bytes in, events or bodies out, without a network.
Paths are relative to the backend's url.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from adapters.base import Capabilities, Event, GenerationRequest, LoadSnapshot, ParameterSupport
from adapters.errors import GatewayError
from adapters.oneshot import (
    DetokenizeRequest,
    DetokenizeResult,
    EmbeddingRequest,
    EmbeddingResult,
    TokenizeRequest,
    TokenizeResult,
)


@dataclass(frozen=True, slots=True)
class Call:
    """One JSON POST: a path under the backend's url and its body."""

    path: str
    body: dict[str, Any]


class Reader(Protocol):
    """The transport as load reading sees it: GETs under the backend's url."""

    base_url: str

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]: ...


@dataclass
class SharedLoad:
    """The one reader of one server's load in this process: the last snapshot and when
    it was read (a runtime's own reader adds what it keeps between reads)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: LoadSnapshot = field(default_factory=LoadSnapshot)
    read_at: float = 0.0


S = TypeVar("S", bound=SharedLoad)
# Per event loop (an asyncio.Lock belongs to one loop), then server. Held by the loop
# itself, weakly, not by its id: a closed loop's readers go with it, and a later loop
# given the same id cannot find them.
_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = weakref.WeakKeyDictionary()


async def shared_load(
    http: Reader, min_interval_s: float, kind: type[S], read: Callable[[Reader, S], Awaitable[LoadSnapshot]]
) -> LoadSnapshot:
    """The server's load, read at most once per `min_interval_s` for every adapter in this
    process, for a runtime whose read is destructive (TRT-LLM's JSON `/metrics` drains its
    stats; llama.cpp's resets its throughput windows). `read` keeps `last` and `read_at`."""
    readers = _SHARED.setdefault(asyncio.get_running_loop(), {})
    reader: S = readers.setdefault(http.base_url, kind())
    async with reader.lock:
        if time.time() - reader.read_at < min_interval_s:
            return reader.last
        return await read(http, reader)


class EventFilter(ABC):
    """One request's rewriting of the decoded events, for a quirk only the whole answer
    shows (TGI's: adapters/tgi_quirks.py)."""

    @abstractmethod
    def feed(self, event: Event) -> list[Event]: ...

    @abstractmethod
    def at_done(self) -> list[Event]:
        """The runtime said the answer is complete (`[DONE]`, or a whole response)."""


class Dialect(Protocol):
    """One backend's runtime dialect (the backend's name, served model and options given)."""

    runtime: str  # the name users know, in error messages
    api_prefix: str  # the OpenAI API's path under the url ("/v1" for a server root)
    health_path: str  # answers 200 when ready
    health_timeout_s: float
    capabilities: Capabilities
    parameters: ParameterSupport
    options: Mapping[str, Any]
    abort_hint: str  # what an operator does when the abort call is refused

    def body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        """The generation's request body; raises a 400 for what the runtime cannot do."""

    def decode_data(self, data: bytes, chat: bool) -> list[Event]:
        """One streamed event's `data`; raises `GatewayError` for an in-stream failure."""

    def decode_answer(self, raw: bytes, chat: bool) -> list[Event]:
        """A whole answer, as the events a stream of it would have given."""

    def event_filter(self, request: GenerationRequest) -> EventFilter | None: ...

    def error(self, status: int, body: bytes | dict) -> GatewayError:
        """An error status or an in-stream error object -> the gateway's error."""

    def abort_calls(self, request: GenerationRequest) -> list[Call]:
        """The runtime's abort calls for a generation left unfinished ([]: closing is enough)."""

    async def load(self, http: Reader) -> LoadSnapshot: ...

    async def ready(self, http: Reader) -> None:
        """Called when a health probe finds the server ready (before its first request):
        what the dialect's request bodies depend on is read here, once (llama.cpp's /props)."""

    def embed_call(self, request: EmbeddingRequest) -> Call: ...

    def read_embeddings(self, payload: Any, request: EmbeddingRequest) -> EmbeddingResult: ...

    def render_call(self, request: TokenizeRequest) -> Call | None:
        """A call that renders `messages` to a prompt first, for a runtime whose tokenizer
        takes text only (None: `tokenize_call` takes the request as it is)."""

    def rendered(self, request: TokenizeRequest, payload: Any) -> TokenizeRequest:
        """The request with the rendered prompt in place of its messages."""

    def tokenize_call(self, request: TokenizeRequest) -> Call: ...

    def read_tokenize(self, payload: Any, request: TokenizeRequest) -> TokenizeResult: ...

    def detokenize_call(self, request: DetokenizeRequest) -> Call: ...

    def read_detokenize(self, payload: Any, request: DetokenizeRequest) -> DetokenizeResult: ...
