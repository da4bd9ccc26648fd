"""adapters/http_adapter.py, continued: health by status and for a silent, absent or
nonsensical server, models and load, and which limit bounds a one-shot call and a
stream (tests/adapters/test_http_adapter.py has the scripted dialect and server)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from adapters.base import ErrorEvent, TextDelta
from adapters.errors import GatewayError
from adapters.http_adapter import HTTPAdapter
from adapters.oneshot import DetokenizeRequest
from tests.adapters.loopback import read_request, serve
from tests.adapters.test_http_adapter import (
    WHOLE,
    Scripted,
    answer,
    completion_chunk,
    done,
    events,
    request,
    with_upstream,
)


@pytest.mark.parametrize(
    ("route", "ok", "detail"),
    [
        (answer(200, b"ok", "text/plain"), True, "ready"),
        (answer(503, b"loading", "text/plain"), False, "Scripted /health answered HTTP 503: loading"),
        (answer(503, b"", "text/plain"), False, "Scripted /health answered HTTP 503"),
    ],
)
async def test_health_by_status(route, ok, detail):
    up, adapter, _, ctx = await with_upstream({"/health": route})
    health = await adapter.health()
    assert (health.ok, health.detail) == (ok, detail)
    assert adapter.dialect.readied == (1 if ok else 0)  # what the dialect reads once ready
    if ok:
        assert adapter.dialect.ready_with is adapter.transport
    await done(adapter, ctx)


async def test_health_of_a_silent_or_absent_server():
    async def silent(reader, writer, n):
        await asyncio.sleep(3600)

    class Patient(Scripted):
        health_timeout_s = 30.0

    async with serve(silent) as (port, _):
        adapter = HTTPAdapter(Patient, "b", f"http://127.0.0.1:{port}", options={"health_timeout_s": 0.1})
        async with asyncio.timeout(3):  # the option's 0.1 s, not the dialect's 30 s
            health = await adapter.health()
        assert (health.ok, health.detail) == (False, "Scripted /health did not answer in time")
        await adapter.aclose()
    health = await HTTPAdapter(Scripted, "b", f"http://127.0.0.1:{port}").health()
    assert health.ok is False and health.detail.startswith("not accepting connections (loading or down): ")


async def test_models_and_load():
    payload = {"data": [{"id": "a"}, {"name": "no id"}, "junk", {"id": "b"}]}
    up, adapter, _, ctx = await with_upstream({"/v1/models": answer(200, payload), "/load": answer(200, b"3")})
    assert await adapter.models() == ["a", "b"]
    assert (await adapter.load()).waiting == 3
    up.routes["/v1/models"] = answer(200, {})
    assert await adapter.models() == []
    await done(adapter, ctx)


async def test_a_one_shot_call_has_a_whole_answer_s_limit_not_a_stream_s():
    async def slow(reader, writer, n):
        while True:
            await read_request(reader)
            await asyncio.sleep(0.5)
            writer.write(answer(200, {"prompt": "hi"}))
            await writer.drain()

    async with serve(slow) as (port, _):
        limits = {"timeout_s": 5.0, "first_byte_timeout_s": 0.2, "stream_idle_timeout_s": 0.2}
        adapter = HTTPAdapter(Scripted, "b", f"http://127.0.0.1:{port}", **limits)
        assert (await adapter.detokenize(DetokenizeRequest("gw-d", "m", [1]))).prompt == "hi"
        await adapter.aclose()


async def test_a_stream_has_a_stream_s_first_byte_limit():
    async def slow(reader, writer, n):
        await read_request(reader)
        await asyncio.sleep(0.5)
        writer.write(answer(200, WHOLE))
        await writer.drain()

    async with serve(slow) as (port, _):
        limits = {"timeout_s": 5.0, "first_byte_timeout_s": 0.2}
        adapter = HTTPAdapter(Scripted, "b", f"http://127.0.0.1:{port}", **limits)
        with pytest.raises(GatewayError) as info:
            await events(adapter, request(True))
        assert (info.value.status, info.value.code) == (504, "upstream_timeout")
        await adapter.aclose()


async def test_a_stream_that_ends_without_done_gives_what_it_sent_and_no_end_events():
    stream = [orjson.dumps(completion_chunk("ab")).decode(), orjson.dumps(completion_chunk("c", "stop")).decode()]
    up, adapter, _, ctx = await with_upstream({"/v1/completions": stream}, shout=True)
    async with asyncio.timeout(5):
        got = await events(adapter, request(True, kind="completion"))
    # the filter saw every event but not a `[DONE]`: nothing of its own at the end
    assert [e for e in got if isinstance(e, TextDelta)] == [TextDelta(0, "AB"), TextDelta(0, "C")]
    assert not [e for e in got if isinstance(e, ErrorEvent)]
    await done(adapter, ctx)


async def test_health_of_a_server_that_answers_nonsense():
    async def hang_up(reader, writer, n):
        await read_request(reader)  # then closes without a word

    async with serve(hang_up) as (port, _):
        adapter = HTTPAdapter(Scripted, "b", f"http://127.0.0.1:{port}")
        health = await adapter.health()
        await adapter.aclose()
    assert health.ok is False and health.detail == "Server disconnected"


async def test_health_detail_is_the_first_200_characters_of_the_answer():
    body = b"\xff" + b"x" * 300
    up, adapter, _, ctx = await with_upstream({"/health": answer(503, body, "text/plain")})
    health = await adapter.health()
    assert health.detail == "Scripted /health answered HTTP 503: \ufffd" + "x" * 199
    await done(adapter, ctx)


def test_the_adapter_shows_its_dialect_s_runtime_parameters_and_capabilities():
    adapter = HTTPAdapter(Scripted, "b", "http://127.0.0.1:9", "served", options={"tokenize": False})
    assert (adapter.name, adapter.dialect.backend, adapter.dialect.served_model) == ("b", "b", "served")
    assert adapter.runtime == "Scripted" and adapter.parameters is Scripted.parameters
    assert adapter.capabilities.tokenize is False and adapter.capabilities is adapter.dialect.capabilities
