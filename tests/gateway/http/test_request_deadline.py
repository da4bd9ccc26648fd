"""Deadlines from the client's timeout header (gateway/http/deadline.py), honoured
while queued and while generating, through the whole HTTP path to a real vLLM
simulator; the official OpenAI client's own header is read and capped.

Every test here ends at its deadline, not at a gateway limit: the queue waits up to
60 s and the upstream's answer takes 20 s, so a deadline that is ignored turns each
test into a 504/200 after those (and its elapsed-time bound fails first)."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import orjson
import pytest

from adapters.base import GenerationRequest, TextDelta
from adapters.errors import FailureKind, GatewayError
from gateway.config.schema import ConfigError, parse_config
from gateway.http.deadline import TIMEOUT_HEADERS, request_deadline
from gateway.serving.phases import CancelPhase
from simulators.testing import start_in_process
from tests.gateway.live_gateway import serving
from tests.gateway.scripted import HANG, ScriptedAdapter, always
from tests.gateway.serving.test_generation import Run, chat, generate, sse_data

SLOW_TOKENS = 400  # at ITL_MS each: a 20 s answer
ITL_MS = 50
QUEUE_WAIT_S = 60
# A deadline ignored would last QUEUE_WAIT_S or the whole 20 s answer; honoured, about
# the deadline. The bound is far from both, for a loaded two-core machine.
WELL_BEFORE_S = 8.0


@pytest.fixture(scope="module")
def sim():
    with start_in_process("vllm", health_latency=0.0, itl_ms=ITL_MS, output_tokens=SLOW_TOKENS) as s:
        yield s


def config(sim, **limits: float) -> dict:
    backend = {"name": "v1", "adapter": "vllm", "url": sim.url, "served_model": "sim-model", "max_inflight": 1}
    return {
        "access_log": False,
        "models": {"m": {"backends": [backend]}},
        "admission": {"max_queue_wait_s": QUEUE_WAIT_S},
        "limits": limits,
    }


def body(stream: bool = False, max_tokens: int = SLOW_TOKENS) -> dict:  # over HTTP
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": stream}


def counted_504(served) -> float:
    """Requests counted as 504, whether a backend had answered yet ("-" when not)."""
    return sum(served.metric("switchyard_requests_total", model="m", backend=b, status="504") for b in ("v1", "-"))


# ---- reading the header ------------------------------------------------------------------------


def test_no_header_no_deadline():
    assert request_deadline({}, 600, now=100.0) is None


@pytest.mark.parametrize("name", TIMEOUT_HEADERS)
def test_each_header_sets_the_deadline_from_now(name):
    assert request_deadline({name: "0.25"}, 600, now=100.0) == 100.25
    assert request_deadline({name: " 7 "}, 600, now=100.0) == 107.0


def test_the_gateways_own_header_wins_over_the_sdks():
    headers = {"x-stainless-read-timeout": "600", "x-stainless-timeout": "600", "x-request-timeout": "2.5"}
    assert request_deadline(headers, 600, now=0.0) == 2.5
    assert request_deadline({"x-stainless-read-timeout": "9", "x-stainless-timeout": "4"}, 600, now=0.0) == 4.0


def test_the_python_sdks_read_timeout_sets_no_deadline_on_a_stream():
    """A stream that keeps sending never trips a read timeout, however long it runs."""
    read = {"x-stainless-read-timeout": "5"}
    assert request_deadline(read, 600, stream=True, now=0.0) is None
    assert request_deadline(read, 600, stream=False, now=0.0) == 5.0
    whole = {"x-request-timeout": "5", "x-stainless-timeout": "6"}
    assert request_deadline(whole, 600, stream=True, now=0.0) == 5.0
    assert request_deadline({"x-stainless-timeout": "6"}, 600, stream=True, now=0.0) == 6.0


def test_a_longer_timeout_is_clamped_to_the_cap():
    assert request_deadline({"x-stainless-timeout": "600"}, 30, now=10.0) == 40.0
    assert request_deadline({"x-request-timeout": "29"}, 30, now=10.0) == 39.0


@pytest.mark.parametrize("raw", ["abc", "", "0", "-1", "nan", "inf", "1e400", "1,5"])
@pytest.mark.parametrize("name", TIMEOUT_HEADERS)
def test_a_bad_value_is_400_naming_the_header(name, raw):
    with pytest.raises(GatewayError) as exc:
        request_deadline({name: raw}, 600)
    assert exc.value.status == 400 and name in exc.value.message
    assert exc.value.code == "invalid_request_timeout"


@pytest.mark.parametrize("cap", [0, -1, "long"])
def test_the_cap_must_be_a_positive_number_of_seconds(cap):
    with pytest.raises(ConfigError, match="max_request_timeout_s"):
        parse_config({"limits": {"max_request_timeout_s": cap}})
    assert parse_config({}).limits.max_request_timeout_s == 600  # the SDKs' default timeout


# ---- honoured over HTTP ------------------------------------------------------------------------


async def test_a_bad_header_is_a_400_over_http_and_starts_nothing(sim):
    before = (await sim.settled())["requests_total"]
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        r = await client.post("/v1/chat/completions", json=body(), headers={"x-request-timeout": "soon"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert "x-request-timeout" in error["message"] and error["type"] == "invalid_request_error"
    assert (await sim.settled())["requests_total"] == before


async def test_a_deadline_passed_in_the_queue_is_504_at_the_deadline(sim):
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=60) as client:
        holder = asyncio.create_task(
            client.post("/v1/chat/completions", json=body(), headers={"x-request-timeout": "30"})
        )
        async with asyncio.timeout(10):  # the one slot is taken
            while served.gateway.protection.snapshot()["in_flight"] < 1:
                await asyncio.sleep(0.01)
        t0 = time.monotonic()
        r = await client.post("/v1/chat/completions", json=body(), headers={"x-request-timeout": "0.2"})
        elapsed = time.monotonic() - t0
        holder.cancel()
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "deadline_exceeded" and "retry-after" not in r.headers
    assert 0.2 <= elapsed < WELL_BEFORE_S, elapsed
    assert served.metric("switchyard_admission_rejected_total", model="m", reason="deadline_exceeded") == 1
    await sim.settled()


async def test_a_whole_answer_past_its_deadline_is_504_and_aborted_upstream(sim):
    before = await sim.settled()
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=60) as client:
        t0 = time.monotonic()
        r = await client.post("/v1/chat/completions", json=body(), headers={"x-request-timeout": "0.3"})
        elapsed = time.monotonic() - t0
    assert r.status_code == 504 and r.json()["error"]["code"] == "deadline_exceeded", r.text
    assert 0.3 <= elapsed < WELL_BEFORE_S, elapsed
    after = await sim.settled()
    assert after["aborted"] == before["aborted"] + 1
    assert after["completed"] == before["completed"]
    assert counted_504(served) == 1


async def test_a_stream_past_its_deadline_ends_with_an_error_event_and_is_aborted_upstream(sim):
    before = await sim.settled()
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=60) as client:
        t0 = time.monotonic()
        r = await client.post("/v1/chat/completions", json=body(stream=True), headers={"x-request-timeout": "0.5"})
        elapsed = time.monotonic() - t0
    assert r.status_code == 200  # the stream had started
    frames = [f.removeprefix("data: ") for f in r.text.split("\n\n") if f]
    assert frames[-1] == "[DONE]"
    assert orjson.loads(frames[-2])["error"]["code"] == "deadline_exceeded"
    assert any(orjson.loads(f).get("choices") for f in frames[:-2])  # content came before it
    assert 0.5 <= elapsed < WELL_BEFORE_S, elapsed
    after = await sim.settled()
    assert after["aborted"] == before["aborted"] + 1
    assert counted_504(served) == 1


async def test_an_answer_within_its_deadline_is_untouched(sim):
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=60) as client:
        r = await client.post("/v1/chat/completions", json=body(max_tokens=3), headers={"x-request-timeout": "30"})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"


async def test_the_openai_clients_own_timeout_header_is_read_and_capped(sim):
    """The SDK sends x-stainless-read-timeout: 600 (its default); the cap makes it 0.3 s."""
    async with serving(config(sim, max_request_timeout_s=0.3)) as served:
        client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="x", max_retries=0)
        t0 = time.monotonic()
        with pytest.raises(openai.APIStatusError) as exc:
            await client.chat.completions.create(**body())
        elapsed = time.monotonic() - t0
        await client.close()
    assert exc.value.status_code == 504 and exc.value.body["code"] == "deadline_exceeded"
    assert elapsed < WELL_BEFORE_S, elapsed
    await sim.settled()


# ---- in process: what is released and closed at the deadline ------------------------------------


def chat_until(seconds: float, stream: bool) -> GenerationRequest:
    return chat(stream=stream, deadline=time.monotonic() + seconds)


async def test_at_the_deadline_before_any_event_the_upstream_is_closed_and_504_sent():
    adapter = ScriptedAdapter("b1", always(HANG))
    run = await generate(adapter, chat_until(0.1, stream=True))
    assert run.status == 504 and orjson.loads(run.body)["error"]["code"] == "deadline_exceeded"
    assert run.releases == [(None, None)]  # released once, and not as a client cancellation
    assert run.metric("switchyard_client_cancellations_total", phase="upstream_headers") == 0
    assert run.metric("switchyard_requests_total", model="m", backend="-", status="504") == 1
    assert run.inflight == 0 and adapter.ended == 1


async def test_at_the_deadline_mid_stream_an_error_event_ends_the_stream():
    adapter = ScriptedAdapter("b1", always(TextDelta(0, "Hi"), HANG))
    run = await generate(adapter, chat_until(0.2, stream=True))
    frames = sse_data(run.body)
    assert run.status == 200 and frames[0]["choices"][0]["delta"]["content"] == "Hi"
    assert frames[-2]["error"]["code"] == "deadline_exceeded" and frames[-1] == "[DONE]"
    [(usage, phase)] = run.releases
    assert phase is None and usage.completion_tokens == 1  # what was seen
    assert run.metric("switchyard_requests_total", model="m", backend="b1", status="504") == 1
    assert run.inflight == 0 and adapter.ended == 1


async def test_at_the_deadline_a_whole_answer_is_504_and_nothing_else_is_sent():
    adapter = ScriptedAdapter("b1", always(TextDelta(0, "Hi"), HANG))
    run = await generate(adapter, chat_until(0.1, stream=False))
    starts = [m for m in run.sent if m["type"] == "http.response.start"]
    assert [m["status"] for m in starts] == [504]
    assert orjson.loads(run.body)["error"]["code"] == "deadline_exceeded"
    assert len(run.releases) == 1 and adapter.ended == 1


async def test_the_deadline_ends_a_retry_backoff_too():
    adapter = ScriptedAdapter("b1", always(GatewayError(503, "down", failure=FailureKind.CONNECT)))
    model = {"backends": ["b1"], "max_retries": 1, "retry_backoff_s": 60}
    t0 = time.monotonic()
    run = await generate(adapter, chat_until(0.1, stream=True), model=model)
    assert run.status == 504 and len(adapter.requests) == 1  # not retried after its deadline
    assert time.monotonic() - t0 < WELL_BEFORE_S  # long before the 60 s backoff
    assert run.releases == [(None, None)]


async def test_a_client_leaving_before_its_deadline_is_still_a_cancellation():
    adapter = ScriptedAdapter("b1", always(HANG))

    async def once_called(run: Run) -> None:
        await adapter.called.wait()

    run = await generate(adapter, chat_until(30, stream=True), leave=once_called)
    assert run.releases == [(None, CancelPhase.UPSTREAM_HEADERS)]
    assert not any(m["type"] == "http.response.start" for m in run.sent)
