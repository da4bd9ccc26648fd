"""TRTLLMDialect's pure parts alone: the iteration-stats parser's edges, the error
classification, and the fields a request may carry to each endpoint."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from adapters.base import GenerationRequest, SamplingParams
from adapters.http_adapter import HTTPAdapter
from adapters.runtime_errors import ParsedError
from adapters.trtllm import CHAT_FIELDS, COMPLETION_FIELDS, TRTLLMDialect, parse_iteration_stats


def entry(it, **kv) -> dict:
    return {"iter": it, "numQueuedRequests": 1, "numActiveRequests": 2, "kvCacheStats": kv}


def test_the_newest_iteration_is_the_one_with_the_highest_number():
    snap = parse_iteration_stats([entry(3, usedNumBlocks=1, maxNumBlocks=4), entry(9), entry(5)], 1.0)
    assert snap.kv_usage is None  # the newest (iter 9) has no block counts
    # An entry without a readable iteration number counts as iteration 0.
    snap = parse_iteration_stats([entry(2, usedNumBlocks=1, maxNumBlocks=4), entry("x"), "junk"], 1.0)
    assert snap.kv_usage == 0.25
    snap = parse_iteration_stats([{"numQueuedRequests": 7}, entry(-1, usedNumBlocks=3, maxNumBlocks=4)], 1.0)
    assert snap.waiting == 7  # no "iter" (0) is newer than iter -1


def test_unreadable_reads_are_none():
    assert parse_iteration_stats({"iter": 1}, 1.0) is None
    assert parse_iteration_stats(["junk", 3], 1.0) is None
    assert parse_iteration_stats([], 1.0) is None


def test_counts_and_kv_usage_only_from_numbers():
    snap = parse_iteration_stats(
        [{"iter": 1, "numQueuedRequests": "3", "numActiveRequests": 2.0, "kvCacheStats": "junk"}], 4.0
    )
    assert (snap.waiting, snap.running, snap.kv_usage, snap.prefix_hit_rate, snap.read_at) == (None, 2, None, None, 4.0)
    assert parse_iteration_stats([entry(1, usedNumBlocks=5, maxNumBlocks=0)], 1.0).kv_usage is None
    assert parse_iteration_stats([entry(1, usedNumBlocks="5", maxNumBlocks=10)], 1.0).kv_usage is None
    assert parse_iteration_stats([entry(1, usedNumBlocks=5, maxNumBlocks="10")], 1.0).kv_usage is None


def test_the_hit_rate_is_reported_or_computed_from_reused_and_missed_blocks():
    assert parse_iteration_stats([entry(1, cacheHitRate=0.4)], 1.0).prefix_hit_rate == 0.4
    assert parse_iteration_stats([entry(1, reusedBlocks=3, missedBlocks=1)], 1.0).prefix_hit_rate == 0.75
    assert (
        parse_iteration_stats([entry(1, cacheHitRate="x", reusedBlocks=1, missedBlocks=3)], 1.0).prefix_hit_rate == 0.25
    )
    assert parse_iteration_stats([entry(1, reusedBlocks=0, missedBlocks=0)], 1.0).prefix_hit_rate is None
    assert parse_iteration_stats([entry(1, reusedBlocks=2)], 1.0).prefix_hit_rate is None
    assert parse_iteration_stats([entry(1, missedBlocks=2)], 1.0).prefix_hit_rate is None
    assert parse_iteration_stats([entry(1, cacheHitRate=0)], 1.0).prefix_hit_rate == 0.0


@pytest.mark.parametrize(
    ("status", "parsed", "expected"),
    [
        (400, ParsedError("Generation failed: worker died"), 500),
        (400, ParsedError("CUDA error: an illegal memory access"), 500),
        (400, ParsedError("torch.OutOfMemoryError: out of memory"), 500),
        (400, ParsedError("internal error"), 500),
        (400, ParsedError("whatever", type="internal_error"), 500),
        (400, ParsedError("temperature must be positive"), None),
        (500, ParsedError("Generation failed"), None),  # the generic rule reads a 500 already
    ],
)
def test_classify_a_400_that_is_the_backends_fault(status, parsed, expected):
    assert TRTLLMDialect("t").classify(status, parsed) == expected


def test_only_declared_fields_are_sent_to_each_endpoint():
    a = TRTLLMDialect("t", "llama")
    chat = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(top_k=5))
    body = a.body(chat, True)
    assert set(body) <= CHAT_FIELDS and body["top_k"] == 5 and body["stream"] is True
    completion = GenerationRequest("r", "m", kind="completion", prompt="hi", sampling=SamplingParams(top_k=5))
    body = a.body(completion, False)
    assert set(body) <= COMPLETION_FIELDS and body["prompt"] == "hi" and "messages" not in body
    assert "messages" not in COMPLETION_FIELDS and "prompt" not in CHAT_FIELDS


def test_the_smallest_counts_still_count():
    assert parse_iteration_stats([entry(1, usedNumBlocks=1, maxNumBlocks=1)], 1.0).kv_usage == 1.0
    assert parse_iteration_stats([entry(1, reusedBlocks=1, missedBlocks=0)], 1.0).prefix_hit_rate == 1.0
    # A non-numeric iteration number ties with iteration 0; the first of a tie wins.
    snap = parse_iteration_stats(
        [entry(0, usedNumBlocks=1, maxNumBlocks=4), entry("x", usedNumBlocks=3, maxNumBlocks=4)], 1.0
    )
    assert snap.kv_usage == 0.25


def test_the_adapter_keeps_its_name_and_reports_cached_tokens():
    a = HTTPAdapter(TRTLLMDialect, "trt-p", "http://127.0.0.1:1", "llama")
    assert a.name == "trt-p" and a.capabilities.cached_tokens is True


async def test_json_metrics_failures_and_idle_reads(replay):
    stats = [entry(4, usedNumBlocks=1, maxNumBlocks=4, cacheHitRate=0.5)]
    replay.reply(
        {"status": 200, "body": json.dumps(stats)},
        {"status": 200, "body": "[]"},  # no iteration since: idle, the last KV and hit rate kept
        {"status": 503, "body": "busy"},
        {"status": 200, "body": "not json"},
        route="GET /metrics",
    )
    a = HTTPAdapter(TRTLLMDialect, "trt-p", replay.url, "llama", options={"metrics_min_interval_s": 0})
    first, idle, failed, garbled = [await a.load() for _ in range(4)]
    await a.aclose()
    assert (first.running, first.kv_usage, first.prefix_hit_rate) == (2, 0.25, 0.5)
    assert (idle.running, idle.waiting, idle.kv_usage, idle.prefix_hit_rate) == (0, 0, 0.25, 0.5)
    for snap in (failed, garbled):
        assert (snap.running, snap.waiting, snap.kv_usage) == (None, None, None)
        assert snap.read_at >= idle.read_at >= first.read_at > 0


def test_the_dialect_keeps_its_backend_and_declares_tools_unless_turned_off():
    d = TRTLLMDialect("trt-p", "llama")
    assert (d.backend, d.served_model, d.capabilities.tools, d.capabilities.cached_tokens) == (
        "trt-p",
        "llama",
        True,
        True,
    )
    assert TRTLLMDialect("trt-p", "llama", {"tools": False}).capabilities.tools is False


class CountingReader:
    """The transport as load reading sees it, in process: the JSON `/metrics` bodies given, in turn."""

    def __init__(self, url: str, *bodies: bytes) -> None:
        self.base_url, self.bodies, self.gets = url, list(bodies), 0

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        assert path == "/metrics"
        self.gets += 1
        return 200, self.bodies.pop(0)


async def test_json_metrics_are_read_at_most_every_half_second_by_default(monkeypatch):
    now = [1000.0]
    clock = SimpleNamespace(time=lambda: now[0])
    monkeypatch.setattr("adapters.dialect.time", clock)
    monkeypatch.setattr("adapters.trtllm.time", clock)
    stats = json.dumps([entry(1, usedNumBlocks=1, maxNumBlocks=4)]).encode()
    http = CountingReader("http://trt-half-second", b"[]", stats, b"[]")
    d = TRTLLMDialect("trt-p", "llama")
    never = await d.load(http)  # no stats ever: unknown, but read now
    assert (never.running, never.kv_usage, never.read_at, http.gets) == (None, None, 1000.0, 1)
    now[0] = 1000.4
    assert await d.load(http) is never and http.gets == 1  # within the half second: the last read
    now[0] = 1000.6
    fresh = await d.load(http)
    assert (fresh.running, fresh.kv_usage, fresh.read_at, http.gets) == (2, 0.25, 1000.6, 2)
    now[0] = 1001.2
    idle = await d.load(http)  # no iteration since: nothing runs, the last KV kept, read now
    assert (idle.running, idle.waiting, idle.kv_usage, idle.read_at, http.gets) == (0, 0, 0.25, 1001.2, 3)
