"""The HTTP client against a real upstream process: one failure kind per way a
request can go wrong, client-side cancellation, and non-streaming answers."""

from __future__ import annotations

import time
import urllib.request

import orjson
import pytest

from bench.client import Client, ClientConfig
from bench.records import RequestRecord
from processes import free_port


async def send_one(
    base: str,
    sim: dict | None = None,
    stream: bool = True,
    timeout_s: float = 10.0,
    cancel_after_s: float | None = None,
    max_tokens: int | None = 8,
) -> RequestRecord:
    cfg = ClientConfig(
        base_url=base,
        model="m",
        stream=stream,
        timeout_s=timeout_s,
        extra_body={"sim": sim} if sim else {},
        api_keys={"t": "sk-test"},
    )
    rec = RequestRecord(index=0, tenant="t", session=0, turn=0, stream=stream, sent_s=0.0, max_tokens=max_tokens)
    async with Client(cfg) as client:
        await client.send(rec, [{"role": "user", "content": "hello"}], time.perf_counter(), cancel_after_s)
    return rec


def sim_stats(base: str) -> dict:
    with urllib.request.urlopen(base + "/_sim/stats") as r:
        return orjson.loads(r.read())


async def test_successful_stream_records_every_chunk(upstream: str) -> None:
    rec = await send_one(upstream)
    assert (rec.outcome, rec.status, rec.finish_reason) == ("ok", 200, "stop")
    assert len(rec.chunk_times) == 8 and rec.usage_completion_tokens == 8
    assert rec.chunk_times == sorted(rec.chunk_times) and rec.end_s >= rec.chunk_times[-1]
    body = sim_stats(upstream)["last_body"]
    assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 8


async def test_non_streaming_answer(upstream: str) -> None:
    rec = await send_one(upstream, stream=False, max_tokens=3)
    assert rec.outcome == "ok" and rec.usage_completion_tokens == 3 and len(rec.chunk_times) == 1


@pytest.mark.parametrize(
    "sim, kind",
    [
        ({"status": 503}, "http_status"),
        ({"fail_after": 3}, "stream_error"),
        ({"cut_after": 3}, "cut_stream"),
        ({"no_done": True}, "cut_stream"),
    ],
)
async def test_failure_kinds(upstream: str, sim: dict, kind: str) -> None:
    rec = await send_one(upstream, sim)
    assert (rec.outcome, rec.failure_kind) == ("failed", kind), rec.error
    if kind == "http_status":
        assert rec.status == 503 and "simulated 503" in rec.error
    if "fail_after" in sim:
        assert len(rec.chunk_times) == 3  # content came first, and it is still a failure


async def test_timeout(upstream: str) -> None:
    rec = await send_one(upstream, {"ttft_ms": 2000}, timeout_s=0.3)
    assert (rec.outcome, rec.failure_kind) == ("failed", "timeout")
    assert 0.3 <= rec.end_s < 1.0


async def test_connection_refused() -> None:
    rec = await send_one(f"http://127.0.0.1:{free_port()}")
    assert (rec.outcome, rec.failure_kind, rec.status) == ("failed", "connection", None)


async def test_cancellation_closes_the_stream_upstream(upstream: str) -> None:
    before = sim_stats(upstream)["aborted"]
    rec = await send_one(upstream, {"itl_ms": 100}, cancel_after_s=0.25)
    assert rec.outcome == "cancelled" and rec.failure_kind is None
    assert 1 <= len(rec.chunk_times) <= 3
    deadline = time.monotonic() + 3
    while sim_stats(upstream)["aborted"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sim_stats(upstream)["aborted"] == before + 1
