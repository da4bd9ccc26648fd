"""adapters/http_adapter.py through a scripted dialect and an in-process server: the
request it sends (path, headers, body), how it reads a whole answer and a stream (the
dialect's event filter, `[DONE]`, errors before and inside a stream), what it does with
the connection when the answer is left unfinished (closed, the runtime's abort calls),
the one-shot calls, health and models."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import orjson
import pytest

from adapters.base import Capabilities, ErrorEvent, Event, Finish, GenerationRequest, LoadSnapshot, TextDelta
from adapters.dialect import Call, EventFilter
from adapters.errors import GatewayError
from adapters.http_adapter import HTTPAdapter
from adapters.oneshot import DetokenizeRequest, EmbeddingRequest, TokenizeRequest
from adapters.openai import OpenAIDialect
from tests.adapters.loopback import CHUNKED, chunk, read_request, serve


class Shout(EventFilter):
    """Upper-cases text and adds one text event when the answer is complete."""

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, TextDelta):
            return [TextDelta(event.index, event.text.upper())]
        return [event]

    def at_done(self) -> list[Event]:
        return [TextDelta(0, "!")]


class Scripted(OpenAIDialect):
    runtime = "Scripted"
    api_prefix = "/v1"
    health_path = "/health"
    health_timeout_s = 0.2
    abort_hint = "the operator's hint"
    context_pattern = re.compile("too long")

    def __init__(self, backend, served_model=None, options=None):
        super().__init__(backend, served_model, options)
        self.readied = 0

    def declare_capabilities(self) -> Capabilities:
        return Capabilities(embeddings=self.option("embeddings", True), tokenize=self.option("tokenize", True))

    def event_filter(self, request):
        return Shout() if self.option("shout", False) and request.kind in ("chat", "completion") else None

    def abort_calls(self, request):
        return [Call("/abort", {"rid": request.request_id})] if self.option("abort", False) else []

    def render_call(self, request):
        return Call("/render", {"messages": request.messages}) if request.messages is not None else None

    def rendered(self, request, payload):
        return TokenizeRequest(request.request_id, request.model, prompt=payload["prompt"])

    async def ready(self, http):
        self.readied += 1
        self.ready_with = http

    async def load(self, http):
        status, raw = await http.get("/load")
        return LoadSnapshot(waiting=int(raw) if status == 200 else None)


def answer(status: int, body: Any, content_type: str = "application/json") -> bytes:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        content_type.encode(),
        len(raw),
        raw,
    )


def text_chunk(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def completion_chunk(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


WHOLE = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
}


class Upstream:
    """Answers each request by its path from `routes` (bytes, or a list of SSE data
    strings / ("sleep", s) / ("cut",) for a chunked stream); records what it was sent."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.seen: list[tuple[bytes, bytes]] = []

    async def handle(self, reader, writer, n):
        while True:
            head, body = await read_request(reader)
            self.seen.append((head, body))
            path = head.split(b" ")[1].decode()
            route = self.routes[path]
            if isinstance(route, bytes):
                writer.write(route)
                await writer.drain()
                continue
            if isinstance(route, tuple):  # ("close", bytes): written, then the connection closed
                writer.write(route[1])
                await writer.drain()
                return
            writer.write(CHUNKED)
            await writer.drain()
            for item in route:
                if isinstance(item, tuple) and item[0] == "sleep":
                    await asyncio.sleep(item[1])
                elif isinstance(item, tuple) and item[0] == "cut":
                    return
                else:
                    writer.write(chunk(b"data: %s\n\n" % item.encode()))
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    def heads(self, path: str) -> list[bytes]:
        return [h for h, _ in self.seen if h.split(b" ")[1] == path.encode()]

    def bodies(self, path: str) -> list[dict]:
        return [orjson.loads(b) for h, b in self.seen if h.split(b" ")[1] == path.encode()]


def request(stream: bool, kind: str = "chat", **kw) -> GenerationRequest:
    if kind == "chat":
        kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    else:
        kw.setdefault("prompt", "hi")
    return GenerationRequest(request_id="gw-1", model="m", kind=kind, stream=stream, **kw)  # type: ignore[arg-type]


async def events(adapter: HTTPAdapter, req: GenerationRequest) -> list[Event]:
    return [e async for e in adapter.generate(req)]


async def with_upstream(routes, **options):
    up = Upstream(routes)
    ctx = serve(up.handle)
    port, accepted = await ctx.__aenter__()
    adapter = HTTPAdapter(Scripted, "b", f"http://127.0.0.1:{port}", "served", options=options)
    return up, adapter, accepted, ctx


async def done(adapter, ctx):
    await adapter.aclose()
    await ctx.__aexit__(None, None, None)


async def test_a_whole_answer_is_asked_for_and_read():
    up, adapter, accepted, ctx = await with_upstream(
        {"/v1/chat/completions": answer(200, WHOLE), "/v1/completions": answer(200, WHOLE)}
    )
    req = request(False, trace_headers=(("traceparent", "00-abc-def-01"),))
    got = await events(adapter, req)
    assert [e for e in got if isinstance(e, TextDelta)] == [TextDelta(0, "hello")]
    assert Finish(0, "stop") in got
    await events(adapter, request(False, kind="completion"))
    head = up.heads("/v1/chat/completions")[0]
    assert b"\r\nContent-Type: application/json\r\n" in head and b"\r\nX-Request-Id: gw-1\r\n" in head
    assert b"\r\ntraceparent: 00-abc-def-01\r\n" in head
    assert up.bodies("/v1/chat/completions")[0]["model"] == "served"
    assert up.bodies("/v1/chat/completions")[0]["stream"] is False
    assert up.bodies("/v1/completions")[0]["prompt"] == "hi"
    assert len(accepted) == 1  # read to its end: the connection is reused
    await done(adapter, ctx)


async def test_the_event_filter_sees_every_event_and_the_end():
    stream = [
        orjson.dumps(completion_chunk("ab")).decode(),
        orjson.dumps(completion_chunk("c", "stop")).decode(),
        "[DONE]",
    ]
    up, adapter, _, ctx = await with_upstream(
        {"/v1/chat/completions": answer(200, WHOLE), "/v1/completions": stream}, shout=True
    )
    whole = [e for e in await events(adapter, request(False)) if isinstance(e, TextDelta)]
    assert whole == [TextDelta(0, "HELLO"), TextDelta(0, "!")]
    streamed = [e for e in await events(adapter, request(True, kind="completion")) if isinstance(e, TextDelta)]
    assert streamed == [TextDelta(0, "AB"), TextDelta(0, "C"), TextDelta(0, "!")]
    await done(adapter, ctx)


async def test_a_stream_ends_at_done_and_its_connection_is_reused():
    stream = [
        orjson.dumps(text_chunk("a")).decode(),
        "[DONE]",
        ("sleep", 0.05),
        orjson.dumps(text_chunk("after")).decode(),
    ]
    up, adapter, accepted, ctx = await with_upstream({"/v1/chat/completions": stream})
    for _ in range(2):
        got = await events(adapter, request(True))
        assert [e for e in got if isinstance(e, TextDelta)] == [TextDelta(0, "a")]
        for _ in range(200):  # what follows `[DONE]` is drained, then the connection is idle
            if adapter.transport._pool._idle:
                break
            await asyncio.sleep(0.01)
    assert len(accepted) == 1
    assert [b["stream"] for b in up.bodies("/v1/chat/completions")] == [True, True]
    await done(adapter, ctx)


async def test_errors_before_and_inside_a_stream():
    too_long = {"error": {"message": "the prompt is too long", "type": "BadRequestError", "code": 400}}
    in_stream = {"error": {"message": "engine died", "code": 500}}
    up, adapter, _, ctx = await with_upstream(
        {
            "/v1/chat/completions": answer(400, too_long),
            "/v1/completions": [orjson.dumps(completion_chunk("a")).decode(), orjson.dumps(in_stream).decode()],
        }
    )
    with pytest.raises(GatewayError) as chat:
        await events(adapter, request(True))
    assert (chat.value.status, chat.value.code, chat.value.param) == (400, "context_length_exceeded", "messages")
    got = await events(adapter, request(True, kind="completion"))
    assert isinstance(got[-1], ErrorEvent) and got[-1].error.status >= 500
    assert [e for e in got if isinstance(e, TextDelta)] == [TextDelta(0, "a")]
    up.routes["/v1/completions"] = answer(400, too_long)
    with pytest.raises(GatewayError) as completion:
        await events(adapter, request(False, kind="completion"))
    assert completion.value.param == "prompt"
    await done(adapter, ctx)


async def test_a_stream_cut_short_ends_with_the_backend_s_error(caplog):
    up, adapter, _, ctx = await with_upstream(
        {"/v1/chat/completions": [orjson.dumps(text_chunk("a")).decode(), ("cut",)]}
    )
    with caplog.at_level(logging.WARNING):
        got = await events(adapter, request(True))
    # the cause in the log
    assert "backend b failed: it cut the stream short (the server closed the connection)" in caplog.text
    assert isinstance(got[-1], ErrorEvent)
    assert (got[-1].error.status, got[-1].error.code) == (502, "upstream_error")
    assert str(got[-1].error).endswith("it cut the stream short")
    await done(adapter, ctx)


async def test_leaving_a_stream_closes_it_and_sends_the_abort_calls(caplog):
    stream = [orjson.dumps(text_chunk("a")).decode(), ("sleep", 3600)]
    up, adapter, accepted, ctx = await with_upstream(
        {"/v1/chat/completions": stream, "/abort": answer(404, {})}, abort=True
    )
    gen = adapter.generate(request(True, trace_headers=(("traceparent", "00-t-s-01"),)))
    assert isinstance(await anext(gen), TextDelta)
    with caplog.at_level(logging.WARNING):
        await gen.aclose()
        await adapter.transport.aclose()  # waits for the abort task
    # refused: the operator is told what to do
    assert "backend b answered HTTP 404 to /abort: the operator's hint" in caplog.text
    (abort_head,) = up.heads("/abort")
    assert up.bodies("/abort") == [{"rid": "gw-1"}] and b"\r\ntraceparent: 00-t-s-01\r\n" in abort_head
    assert len(accepted) >= 2  # the stream's connection was closed, not reused for the abort
    await done(adapter, ctx)


@pytest.mark.parametrize("status", [400, 503])
async def test_a_refused_request_sends_no_abort_call(status):
    up, adapter, _, ctx = await with_upstream(
        {"/v1/chat/completions": answer(status, {"error": {"message": "no"}}), "/abort": answer(200, {})}, abort=True
    )
    with pytest.raises(GatewayError):
        await events(adapter, request(True))
    await adapter.transport.aclose()
    assert up.heads("/abort") == []
    await done(adapter, ctx)


async def test_one_shot_calls():
    up, adapter, _, ctx = await with_upstream(
        {
            "/v1/embeddings": answer(
                200, {"data": [{"index": 0, "embedding": [0.5, 1.5]}], "usage": {"prompt_tokens": 2}}
            ),
            "/render": answer(200, {"prompt": "rendered"}),
            "/tokenize": answer(200, {"tokens": [1, 2], "max_model_len": 8}),
            "/detokenize": answer(200, {"prompt": "hi"}),
        }
    )
    emb = await adapter.embed(EmbeddingRequest("gw-e", "m", ["x"]))
    assert emb.vectors == [[0.5, 1.5]]
    (emb_head,) = up.heads("/v1/embeddings")
    assert b"\r\nX-Request-Id: gw-e\r\n" in emb_head and b"\r\nContent-Type: application/json\r\n" in emb_head
    tok = await adapter.tokenize(TokenizeRequest("gw-t", "m", messages=[{"role": "user", "content": "hi"}]))
    assert tok.tokens == [1, 2] and tok.max_model_len == 8
    assert up.bodies("/render") == [{"messages": [{"role": "user", "content": "hi"}]}]
    assert b"\r\nX-Request-Id: gw-t\r\n" in up.heads("/render")[0]
    assert b"\r\nX-Request-Id: gw-t\r\n" in up.heads("/tokenize")[0]
    assert up.bodies("/tokenize")[0]["prompt"] == "rendered"
    await adapter.tokenize(TokenizeRequest("gw-t2", "m", prompt="plain"))
    assert len(up.heads("/render")) == 1 and up.bodies("/tokenize")[1]["prompt"] == "plain"
    assert (await adapter.detokenize(DetokenizeRequest("gw-d", "m", [1, 2]))).prompt == "hi"
    assert up.bodies("/detokenize") == [{"model": "served", "tokens": [1, 2]}]
    assert b"\r\nX-Request-Id: gw-d\r\n" in up.heads("/detokenize")[0]
    await done(adapter, ctx)


async def test_one_shot_calls_a_runtime_does_not_serve_are_refused_without_a_call():
    up, adapter, _, ctx = await with_upstream({}, embeddings=False, tokenize=False)
    for call in (
        adapter.embed(EmbeddingRequest("gw-e", "m", ["x"])),
        adapter.tokenize(TokenizeRequest("gw-t", "m", prompt="x")),
        adapter.detokenize(DetokenizeRequest("gw-d", "m", [1])),
    ):
        with pytest.raises(GatewayError) as info:
            await call
        assert info.value.status in (400, 404)
    assert up.seen == []
    await done(adapter, ctx)


async def test_one_shot_failures(caplog):
    too_long = {"error": {"message": "input too long", "code": 400}}
    garbage = b"not json " * 40
    up, adapter, _, ctx = await with_upstream(
        {
            "/v1/embeddings": answer(400, too_long),
            "/tokenize": answer(200, garbage),
            "/detokenize": answer(500, {"error": {"message": "boom"}}),
        }
    )
    with pytest.raises(GatewayError) as emb:
        await adapter.embed(EmbeddingRequest("gw-e", "m", ["x"]))
    assert (emb.value.code, emb.value.param) == ("context_length_exceeded", "input")
    with caplog.at_level(logging.WARNING), pytest.raises(GatewayError) as tok:
        await adapter.tokenize(TokenizeRequest("gw-t", "m", prompt="x"))
    assert (tok.value.status, str(tok.value).endswith("its answer was not JSON")) == (502, True)
    # its first 200 bytes in the log
    assert f"backend b failed: its answer was not JSON ({garbage[:200]!r})" in caplog.text
    with pytest.raises(GatewayError) as detok:
        await adapter.detokenize(DetokenizeRequest("gw-d", "m", [1]))
    assert detok.value.status == 502
    await done(adapter, ctx)


async def test_a_one_shot_answer_cut_short_closes_its_connection():
    up, adapter, accepted, ctx = await with_upstream(
        {
            "/tokenize": ("close", b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"),
            "/detokenize": answer(200, {"prompt": "x"}),
        }
    )
    with pytest.raises(GatewayError) as info:
        await adapter.tokenize(TokenizeRequest("gw-t", "m", prompt="x"))
    assert (info.value.status, str(info.value).endswith("it cut its answer short")) == (502, True)
    # the broken connection was closed, not put back: the next call opens a new one
    assert (await adapter.detokenize(DetokenizeRequest("gw-d", "m", [1]))).prompt == "x"
    assert len(accepted) == 2
    await done(adapter, ctx)
