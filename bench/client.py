"""The HTTP side of the harness: one aiohttp session (a shared connector, keep-alive)
sends chat completions and timestamps every SSE event as it is read.

Kept deliberately cheap: on a small machine the load generator competes with the
server for CPU. Bodies are pre-serialized with orjson, the SSE stream is split by
hand from `iter_any()` reads, and answer text is only kept when a multi-turn
conversation needs it for its next turn.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import orjson

from bench.records import RequestRecord


@dataclass(slots=True)
class ClientConfig:
    base_url: str
    model: str
    stream: bool = True
    timeout_s: float = 300.0
    api_keys: dict[str, str] = field(default_factory=dict)  # tenant -> key
    ignore_eos: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    endpoint: Literal["chat", "completions"] = "chat"  # completions: `messages` is sent as the prompt

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        path = "/chat/completions" if self.endpoint == "chat" else "/completions"
        return base + (path if base.endswith("/v1") else "/v1" + path)


class StreamState:
    __slots__ = ("done", "error", "text", "keep_text")

    def __init__(self, keep_text: bool) -> None:
        self.done = False
        self.error: str | None = None
        self.text: list[str] = []
        self.keep_text = keep_text


def _absorb(obj: Any, rec: RequestRecord, state: StreamState) -> bool:
    """Fold one parsed chunk (or body) into the record; True if it carried content."""
    if not isinstance(obj, dict):
        return False
    err = obj.get("error")
    if err:
        state.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
        return False
    content = False
    for ch in obj.get("choices") or ():
        piece = ch.get("delta")
        if piece is None:
            piece = ch.get("message")
        if piece is not None:
            text = piece.get("content")
            if piece.get("reasoning_content") or piece.get("reasoning") or piece.get("tool_calls"):
                content = True
        else:
            text = ch.get("text")
        if text:
            content = True
            rec.output_chars += len(text)
            if state.keep_text:
                state.text.append(text)
        if ch.get("finish_reason"):
            rec.finish_reason = ch["finish_reason"]
    usage = obj.get("usage")
    if usage:
        rec.usage_prompt_tokens = usage.get("prompt_tokens")
        rec.usage_completion_tokens = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            rec.cached_tokens = details["cached_tokens"]
    return content


class Client:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None
        self._headers: dict[str, dict[str, str]] = {}

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    def _headers_for(self, tenant: str) -> dict[str, str]:
        h = self._headers.get(tenant)
        if h is None:
            h = {"Content-Type": "application/json"}
            key = self.config.api_keys.get(tenant)
            if key:
                h["Authorization"] = f"Bearer {key}"
            self._headers[tenant] = h
        return h

    def body(self, messages: list[dict[str, Any]], max_tokens: int | None) -> bytes:
        key = "messages" if self.config.endpoint == "chat" else "prompt"
        body: dict[str, Any] = {"model": self.config.model, key: messages, "stream": self.config.stream}
        if self.config.stream:
            body["stream_options"] = {"include_usage": True}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if self.config.ignore_eos:
            body["ignore_eos"] = True
        body.update(self.config.extra_body)
        return orjson.dumps(body)

    async def send(
        self,
        rec: RequestRecord,
        messages: list[dict[str, Any]],
        t0: float,
        cancel_after_s: float | None = None,
        keep_text: bool = False,
    ) -> str:
        """Send one request, filling `rec`; returns the answer text if `keep_text`."""
        assert self._session is not None, "use `async with Client(...)`"
        data = self.body(messages, rec.max_tokens)
        headers = self._headers_for(rec.tenant)
        state = StreamState(keep_text)
        timeout = self.config.timeout_s
        cancelling = cancel_after_s is not None and cancel_after_s < timeout
        limit = cancel_after_s if cancelling else timeout
        got_headers = False
        start = time.perf_counter()
        rec.sent_s = start - t0
        try:
            async with asyncio.timeout(limit):
                async with self._session.post(self.config.url, data=data, headers=headers) as resp:
                    got_headers = True
                    rec.status = resp.status
                    if resp.status != 200:
                        raw = await resp.read()
                        rec.end_s = time.perf_counter() - start
                        _fail(rec, "http_status", _error_text(raw, resp.status))
                        return ""
                    if self.config.stream:
                        await _read_stream(resp, SseDecoder(rec, state), start)
                    else:
                        raw = await resp.read()
                        now = time.perf_counter() - start
                        try:
                            obj = orjson.loads(raw)
                        except orjson.JSONDecodeError:
                            obj = None
                        if _absorb(obj, rec, state):
                            rec.chunk_times.append(now)
                        state.done = isinstance(obj, dict) and "choices" in obj
                    rec.end_s = time.perf_counter() - start
        except TimeoutError:
            rec.end_s = time.perf_counter() - start
            if cancelling:
                rec.outcome = "cancelled"
            else:
                _fail(rec, "timeout", f"no complete answer within {timeout:g} s")
            return ""
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            ConnectionError,
        ) as exc:
            rec.end_s = time.perf_counter() - start
            _fail(rec, "cut_stream" if got_headers else "connection", f"{type(exc).__name__}: {exc}")
            return ""
        except aiohttp.ClientError as exc:
            rec.end_s = time.perf_counter() - start
            _fail(rec, "connection", f"{type(exc).__name__}: {exc}")
            return ""
        settle(rec, state, self.config.stream)
        return "".join(state.text)


async def _read_stream(resp: aiohttp.ClientResponse, decoder: SseDecoder, start: float) -> None:
    async for piece in resp.content.iter_any():
        decoder.feed(piece, time.perf_counter() - start)


class SseDecoder:
    """Splits an SSE byte stream into `data:` events and folds each into the record,
    timestamping content chunks with the time their bytes were read."""

    __slots__ = ("rec", "state", "_buf")

    def __init__(self, rec: RequestRecord, state: StreamState) -> None:
        self.rec = rec
        self.state = state
        self._buf = b""

    def feed(self, piece: bytes, now: float) -> None:
        *lines, self._buf = (self._buf + piece).split(b"\n")
        rec, state = self.rec, self.state
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # blank separators, ":" comments, event:/id: fields
            payload = line[5:].strip()
            if payload == b"[DONE]":
                state.done = True
                continue
            rec.chunks_total += 1
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError:
                state.error = state.error or f"unparseable chunk: {payload[:120]!r}"
                continue
            if _absorb(obj, rec, state):
                rec.chunk_times.append(now)


def settle(rec: RequestRecord, state: StreamState, stream: bool) -> None:
    """Judge a request whose HTTP exchange ended normally (status 200, no exception):
    an error event fails it even after content; a missing [DONE] is a cut stream."""
    if state.error is not None:
        _fail(rec, "stream_error", state.error)
    elif not state.done:
        _fail(rec, "cut_stream", "stream ended without data: [DONE]" if stream else "body is not a chat completion")


def _fail(rec: RequestRecord, kind: str, message: str) -> None:
    rec.outcome = "failed"
    rec.failure_kind = kind  # type: ignore[assignment]
    rec.error = message


def _error_text(raw: bytes, status: int) -> str:
    try:
        obj = orjson.loads(raw)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return f"HTTP {status}: {err['message']}"[:300]
    except orjson.JSONDecodeError:
        pass
    return f"HTTP {status}: {raw[:200].decode(errors='replace')}"
