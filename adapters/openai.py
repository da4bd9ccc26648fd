"""The generic adapter for any OpenAI-compatible upstream.

Generation requests go through a keep-alive pool of the fast client
(adapters/http_client.py; aiohttp for https upstreams); health and model
listing use a pooled aiohttp session. Streams always ask the upstream for
usage (the gateway needs it for quotas) and the gateway strips it unless the
client asked. Closing the event iterator closes the upstream connection, which
is how OpenAI-compatible servers learn that the client went away.

Error responses go through the one table of upstream statuses
(adapters/runtime_errors.py), the same for this adapter and every runtime's.
Runtime adapters subclass this and override the `_`-prefixed hooks.

Each wait on the upstream has its own bound (docs/adapters.md, "Timeouts"): a free
pool connection (`pool_wait_s`), the connect, a streamed answer's first byte
(`first_byte_timeout_s`) and the silence between its chunks
(`stream_idle_timeout_s`), a non-streamed answer as a whole (`timeout_s`). The
request id sent upstream (`X-Request-Id`) is the gateway's own, never the client's;
a traced request also carries its attempt's W3C `traceparent` (`trace_headers`).
"""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from adapters import oneshot_wire
from adapters import openai_wire as wire
from adapters.base import (
    Adapter,
    Capabilities,
    ErrorEvent,
    Event,
    GenerationRequest,
    Health,
)
from adapters.errors import (
    GatewayError,
    upstream_busy,
    upstream_failed,
    upstream_timeout,
    upstream_unavailable,
)
from adapters.http_client import ConnectionPool, HTTPError, PoolTimeout, ReadTimeout
from adapters.oneshot import EmbeddingRequest, EmbeddingResult
from adapters.runtime_errors import ParsedError, runtime_error


class EventFilter(ABC):
    """One request's rewriting of the decoded events, for a runtime quirk only the
    whole answer shows (TGI's: a stop sequence left in the text, pre-3.2 tool calls
    buffered as raw grammar output, no finish after a streamed tool call)."""

    @abstractmethod
    def feed(self, event: Event) -> list[Event]: ...

    @abstractmethod
    def at_done(self) -> list[Event]:
        """The runtime said the answer is complete (`[DONE]`, or a whole response)."""


class OpenAIAdapter(Adapter):
    # OpenAI's /v1/embeddings; `options.embeddings: false` when the upstream's model cannot.
    capabilities = Capabilities(cached_tokens=True, embeddings=True)
    # Path under `base_url`; runtime adapters whose url is the server root use "/v1".
    api_prefix = ""
    runtime = "OpenAI-compatible"  # the name users know, used in error messages
    context_pattern: re.Pattern[str] | None = None  # the runtime's context-length message

    def __init__(
        self,
        name: str,
        url: str,
        served_model: str | None = None,
        *,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 5.0,
        first_byte_timeout_s: float = 60.0,
        stream_idle_timeout_s: float = 30.0,
        pool_wait_s: float = 5.0,
        max_connections: int = 256,
        options: dict | None = None,
    ) -> None:
        super().__init__(name)
        self.base_url = url.rstrip("/")
        self.served_model = served_model
        self.options = options or {}
        if type(self).capabilities.embeddings and "embeddings" in self.options:
            self.capabilities = dataclasses.replace(self.capabilities, embeddings=bool(self.options["embeddings"]))
        self.timeout_s = timeout_s
        self.first_byte_timeout_s = first_byte_timeout_s
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._pool_wait_s = pool_wait_s
        # The cold paths (health, load, models, SGLang's abort) set their own totals.
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=pool_wait_s + connect_timeout_s, sock_connect=connect_timeout_s, sock_read=timeout_s
        )
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        parts = urlsplit(self.base_url)
        self._url_path = parts.path.rstrip("/") + self.api_prefix
        self._pool = (
            ConnectionPool(
                self.base_url, limit=max_connections, pool_wait=pool_wait_s, connect_timeout=connect_timeout_s
            )
            if parts.scheme == "http"
            else None
        )

    # ---- connection pool ---------------------------------------------------

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._max_connections, ttl_dns_cache=300, enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                json_serialize=lambda o: orjson.dumps(o).decode(),
                auto_decompress=False,
            )
        return self._session

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _url(self, path: str) -> str:
        return f"{self.base_url}{self.api_prefix}{path}"

    # ---- hooks for runtime adapters ------------------------------------------

    def _build_body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        return wire.build_body(request, self.served_model, stream=stream)

    def _classify(self, status: int, parsed: ParsedError) -> int | None:
        """A status to use instead of the one the body or HTTP gave, before the table
        maps it (500 there means "the backend's fault", answered as 502)."""
        return None

    def _error(self, status: int, body: bytes) -> GatewayError:
        return runtime_error(
            status,
            body,
            backend=self.name,
            runtime=self.runtime,
            context_pattern=self.context_pattern,
            classify=self._classify,
        )

    def _decode_chunk(self, payload: dict, chat: bool) -> list[Event]:
        return wire.decode_chunk(payload, chat, self.name)

    def _decode_response(self, payload: dict, chat: bool) -> list[Event]:
        return wire.decode_response(payload, chat, self.name)

    def _event_filter(self, request: GenerationRequest) -> EventFilter | None:
        """The filter for this runtime's stream quirks, per request (None: none)."""
        return None

    async def _on_abort(self, request: GenerationRequest) -> None:
        """Called when the client went away before the upstream finished."""

    # ---- generation ----------------------------------------------------------

    async def _post(self, path: str, body: bytes, headers: dict[str, str], stream: bool):
        """POST on the hot path: the fast client for http, aiohttp for https (whose
        one read limit per request is the first-byte limit for a stream)."""
        first_byte = self.first_byte_timeout_s if stream else self.timeout_s
        idle = self.stream_idle_timeout_s if stream else self.timeout_s
        if self._pool is not None:
            return await self._pool.request(
                "POST", self._url_path + path, body, headers, first_byte=first_byte, idle=idle
            )
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self._pool_wait_s + self._connect_timeout_s,
            sock_connect=self._connect_timeout_s,
            sock_read=max(first_byte, idle),
        )
        resp = await self.session.post(self._url(path), data=body, headers=headers, timeout=timeout)
        return _AiohttpResponse(resp)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        chat = request.kind == "chat"
        path = "/chat/completions" if chat else "/completions"
        body = orjson.dumps(self._build_body(request, request.stream))
        headers = {
            "Content-Type": "application/json",
            "X-Request-Id": request.request_id,
            **dict(request.trace_headers),
        }
        resp = None
        completed = False
        try:
            try:
                resp = await self._post(path, body, headers, request.stream)
            except PoolTimeout as exc:
                raise upstream_busy(self.name, str(exc), exc.waited_s) from None
            except ReadTimeout as exc:
                raise upstream_timeout(self.name, str(exc), exc.waited_s, first_byte=True) from None
            except TimeoutError as exc:  # aiohttp (https)
                limit = self.first_byte_timeout_s if request.stream else self.timeout_s
                raise upstream_timeout(self.name, str(exc) or "timeout", limit, first_byte=True) from None
            except (HTTPError, aiohttp.ClientConnectionError, OSError) as exc:
                raise upstream_unavailable(self.name, str(exc) or type(exc).__name__) from None
            if resp.status >= 400:
                raise self._error(resp.status, await self._read(resp))
            quirks = self._event_filter(request)
            if request.stream:
                async for event in self._stream_events(resp, chat, quirks):
                    yield event
            else:
                raw = await self._read(resp)
                try:
                    payload = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    raise upstream_failed(self.name, "its answer was not JSON", internal=repr(raw[:200])) from None
                if isinstance(payload, dict) and payload.get("error"):
                    raise self._error(502, raw)
                events = self._decode_response(payload, chat)
                if quirks is not None:
                    events = [out for event in events for out in quirks.feed(event)] + quirks.at_done()
                for event in events:
                    yield event
            completed = True
        finally:
            if resp is not None:
                if completed:
                    resp.release()
                else:
                    # Not finished: drop the connection so the runtime stops working.
                    resp.close()
                    await self._on_abort(request)

    async def _read(self, resp) -> bytes:
        try:
            return await resp.read()
        except ReadTimeout as exc:
            raise upstream_timeout(self.name, str(exc), exc.waited_s, exc.first_byte) from None
        except (TimeoutError, HTTPError, aiohttp.ClientError) as exc:
            raise upstream_failed(
                self.name, "it cut its answer short", internal=str(exc) or type(exc).__name__
            ) from None

    async def _stream_events(self, resp, chat: bool, quirks: EventFilter | None) -> AsyncIterator[Event]:
        """The stream's events. A stream that ends without finishing its choices is
        not this method's concern: the gateway's stream guard reports it."""
        saw_done = False
        try:
            async for data in wire.iter_sse_data(resp.iter_lines()):
                if data.startswith(b"[DONE]"):
                    saw_done = True
                    break
                try:
                    payload = orjson.loads(data)
                except orjson.JSONDecodeError:
                    yield ErrorEvent(
                        upstream_failed(self.name, "it sent a stream event that is not JSON", internal=repr(data[:200]))
                    )
                    return
                if not isinstance(payload, dict):
                    continue
                if payload.get("error"):
                    yield ErrorEvent(self._error(500, data))
                    return
                for event in self._decode_chunk(payload, chat):
                    if quirks is None:
                        yield event
                    else:
                        for out in quirks.feed(event):
                            yield out
        except ReadTimeout as exc:
            yield ErrorEvent(upstream_timeout(self.name, str(exc), exc.waited_s, exc.first_byte))
            return
        except TimeoutError as exc:  # aiohttp (https)
            limit = max(self.first_byte_timeout_s, self.stream_idle_timeout_s)
            yield ErrorEvent(upstream_timeout(self.name, str(exc) or "timeout", limit, first_byte=False))
            return
        except (HTTPError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            yield ErrorEvent(
                upstream_failed(self.name, "it cut the stream short", internal=str(exc) or type(exc).__name__)
            )
            return
        except GatewayError as exc:
            yield ErrorEvent(exc)
            return
        if saw_done and quirks is not None:
            for out in quirks.at_done():
                yield out

    # ---- calls that generate nothing (adapters/oneshot.py) --------------

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        body = oneshot_wire.embedding_body(request, self.served_model)
        try:
            payload = await self._call_json("/embeddings", body, request.request_id)
        except GatewayError as err:
            raise oneshot_wire.embedding_error(err) from None
        return oneshot_wire.decode_embeddings(payload, len(request.inputs), self.name)

    async def _call_json(self, path: str, body: dict[str, Any], request_id: str, *, under_api: bool = True) -> Any:
        """POST one JSON body, read one JSON answer: `path` under the API prefix, or under
        the server root (`under_api=False`: vLLM's /tokenize). The whole answer within
        `timeout_s`; an error status through the one status table. Unless the answer was
        read to its end, the connection is closed: a cancelled call stops the runtime's work."""
        root = urlsplit(self.base_url).path.rstrip("/")
        url_path = (self._url_path if under_api else root) + path
        data = orjson.dumps(body)
        headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
        resp: Any = None  # the fast client's Response, or aiohttp's behind the same interface
        read = False
        try:
            try:
                if self._pool is not None:
                    resp = await self._pool.request(
                        "POST", url_path, data, headers, first_byte=self.timeout_s, idle=self.timeout_s
                    )
                else:
                    timeout = aiohttp.ClientTimeout(
                        total=None,
                        connect=self._pool_wait_s + self._connect_timeout_s,
                        sock_connect=self._connect_timeout_s,
                        sock_read=self.timeout_s,
                    )
                    origin = self.base_url[: len(self.base_url) - len(root)] if root else self.base_url
                    resp = _AiohttpResponse(
                        await self.session.post(origin + url_path, data=data, headers=headers, timeout=timeout)
                    )
            except PoolTimeout as exc:
                raise upstream_busy(self.name, str(exc), exc.waited_s) from None
            except ReadTimeout as exc:
                raise upstream_timeout(self.name, str(exc), exc.waited_s, first_byte=True) from None
            except TimeoutError as exc:  # aiohttp (https)
                raise upstream_timeout(self.name, str(exc) or "timeout", self.timeout_s, first_byte=True) from None
            except (HTTPError, aiohttp.ClientConnectionError, OSError) as exc:
                raise upstream_unavailable(self.name, str(exc) or type(exc).__name__) from None
            raw = await self._read(resp)
            read = True
            if resp.status >= 400:
                raise self._error(resp.status, raw)
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise upstream_failed(self.name, "its answer was not JSON", internal=repr(raw[:200])) from None
        finally:
            if resp is not None:
                if read:
                    resp.release()
                else:
                    resp.close()

    # ---- health, load, models ------------------------------------------------

    async def health(self) -> Health:
        try:
            async with self.session.get(self._url("/models"), timeout=aiohttp.ClientTimeout(total=5)) as resp:
                return Health(resp.status == 200, f"HTTP {resp.status}")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return Health(False, str(exc) or type(exc).__name__)

    async def models(self) -> list[str]:
        async with self.session.get(self._url("/models"), timeout=aiohttp.ClientTimeout(total=5)) as resp:
            payload = orjson.loads(await resp.read())
        return [m["id"] for m in payload.get("data", []) if isinstance(m, dict) and "id" in m]


class _AiohttpResponse:
    """An aiohttp response behind the fast client's Response interface (https)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status

    async def read(self) -> bytes:
        return await self._resp.read()

    def iter_lines(self):
        return self._resp.content.__aiter__()

    def release(self) -> None:
        self._resp.release()

    def close(self) -> None:
        self._resp.close()
