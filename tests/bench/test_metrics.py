"""Metric code on synthetic timelines with known answers, including the formulas'
edge cases: one-token outputs, empty chunks, role-only chunks, mid-stream errors."""

from __future__ import annotations

import orjson
import pytest

from bench.client import SseDecoder, StreamState, settle
from bench.metrics import (
    Slo,
    distribution_ms,
    meets_slo,
    peak_concurrency,
    percentile,
    request_metrics,
    summarize,
    summarize_run,
)
from bench.records import RequestRecord


def rec(
    chunks: list[float],
    end: float,
    n: int | None = None,
    sent: float = 0.0,
    tenant: str = "t",
    stream: bool = True,
    **kw,
) -> RequestRecord:
    return RequestRecord(
        index=0,
        tenant=tenant,
        session=0,
        turn=0,
        stream=stream,
        sent_s=sent,
        chunk_times=chunks,
        end_s=end,
        usage_completion_tokens=n,
        **kw,
    )


def sse(*events: object) -> bytes:
    out = b""
    for e in events:
        out += b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n\n"
    return out


def delta(**d: object) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def decode(timeline: list[tuple[float, bytes]]) -> tuple[RequestRecord, StreamState]:
    r = RequestRecord(index=0, tenant="t", session=0, turn=0, stream=True, sent_s=0.0)
    state = StreamState(keep_text=True)
    dec = SseDecoder(r, state)
    for t, piece in timeline:
        dec.feed(piece, t)
    r.end_s = timeline[-1][0]
    settle(r, state, stream=True)
    return r, state


def test_ttft_itl_tpot_from_known_timeline() -> None:
    m = request_metrics(rec([0.100, 0.150, 0.250], end=0.300, n=3))
    assert m is not None
    assert m.ttft_s == pytest.approx(0.100)
    assert m.itls_s == pytest.approx((0.050, 0.100))
    assert m.tpot_s == pytest.approx((0.300 - 0.100) / 2)
    assert m.e2e_s == pytest.approx(0.300)
    assert (m.output_tokens, m.tokens_source) == (3, "usage")


def test_tpot_uses_usage_tokens_over_chunk_count() -> None:
    # Two chunks carrying 5 tokens: TPOT divides by n-1 = 4 tokens, ITL stays per chunk.
    m = request_metrics(rec([0.1, 0.5], end=0.5, n=5))
    assert m.tpot_s == pytest.approx(0.4 / 4)
    assert m.itls_s == pytest.approx((0.4,))


def test_without_usage_tokens_are_counted_as_chunks() -> None:
    m = request_metrics(rec([0.1, 0.2, 0.3, 0.4], end=0.4, n=None))
    assert (m.output_tokens, m.tokens_source) == (4, "chunks")
    assert m.tpot_s == pytest.approx(0.1)


def test_one_token_output_has_no_tpot_and_no_itl() -> None:
    m = request_metrics(rec([0.2], end=0.25, n=1))
    assert m.ttft_s == pytest.approx(0.2)
    assert m.tpot_s is None
    assert m.itls_s == ()
    # ... and a TPOT SLO cannot be missed by it (vLLM treats it as tpot 0).
    assert meets_slo(m, Slo(tpot_ms=0.001))
    assert not meets_slo(m, Slo(ttft_ms=100))


def test_non_streaming_ttft_is_the_whole_answer() -> None:
    m = request_metrics(rec([0.4], end=0.4, n=7, stream=False))
    assert m.ttft_s == pytest.approx(0.4)
    assert m.tpot_s is None and m.itls_s == ()


def test_role_only_and_empty_chunks_do_not_start_ttft() -> None:
    r, _ = decode(
        [
            (0.010, sse(delta(role="assistant", content=""))),  # role-only, as vLLM and OpenAI send it
            (0.020, sse(delta(content=""))),  # empty content
            (0.030, sse(delta())),  # empty delta
            (0.100, sse(delta(content="Hel"))),
            (0.180, sse(delta(content="lo"))),
            (
                0.190,
                sse(
                    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                ),
            ),
            (
                0.200,
                sse(
                    {
                        "object": "chat.completion.chunk",
                        "choices": [],
                        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
                    },
                    b"[DONE]",
                ),
            ),
        ]
    )
    assert r.outcome == "ok"
    assert r.chunk_times == [0.100, 0.180]
    assert r.chunks_total == 7  # every data event but [DONE]
    assert (r.usage_prompt_tokens, r.usage_completion_tokens, r.finish_reason) == (9, 2, "stop")
    m = request_metrics(r)
    assert m.ttft_s == pytest.approx(0.100)
    assert m.itls_s == pytest.approx((0.080,))
    assert m.tpot_s == pytest.approx((0.200 - 0.100) / 1)


def test_tool_call_and_reasoning_deltas_count_as_content() -> None:
    r, _ = decode(
        [
            (0.05, sse(delta(reasoning_content="think"))),
            (0.07, sse(delta(tool_calls=[{"index": 0, "function": {"arguments": "{"}}]))),
            (0.09, sse(b"[DONE]")),
        ]
    )
    assert r.chunk_times == [0.05, 0.07]


def test_events_split_across_reads_are_timed_when_complete() -> None:
    whole = sse(delta(content="a"), delta(content="b"), b"[DONE]")
    r, state = decode([(0.1, whole[:10]), (0.2, whole[10:40]), (0.3, whole[40:])])
    assert state.text == ["a", "b"]
    assert r.outcome == "ok"
    assert all(t in (0.2, 0.3) for t in r.chunk_times) and len(r.chunk_times) == 2


def test_mid_stream_error_after_content_is_a_failure() -> None:
    r, _ = decode(
        [
            (0.1, sse(delta(content="partial"))),
            (0.2, sse({"error": {"message": "engine died", "type": "server_error"}}, b"[DONE]")),
        ]
    )
    assert (r.outcome, r.failure_kind) == ("failed", "stream_error")
    assert "engine died" in r.error
    assert request_metrics(r) is None


def test_stream_without_done_is_a_cut_stream() -> None:
    r, _ = decode([(0.1, sse(delta(content="a")))])
    assert (r.outcome, r.failure_kind) == ("failed", "cut_stream")


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([float(i) for i in range(1, 101)], 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    d = distribution_ms([0.001, 0.002, 0.003])
    assert (d["count"], d["p50"], d["mean"], d["max"]) == (
        3,
        pytest.approx(2.0),
        pytest.approx(2.0),
        pytest.approx(3.0),
    )
    assert distribution_ms([])["p99"] is None


def test_summary_counts_goodput_failures_and_rates() -> None:
    records = [
        rec([0.05, 0.10], end=0.10, n=2, sent=0.0),  # good: ttft 50 ms
        rec([0.30, 0.40], end=0.40, n=2, sent=0.5),  # misses ttft SLO
        rec([], end=0.02, sent=1.0, status=429, outcome="failed", failure_kind="http_status"),
        rec([0.1], end=0.15, sent=1.2, outcome="failed", failure_kind="stream_error"),
        rec([], end=0.3, sent=1.5, outcome="cancelled"),
        rec([0.05, 0.10, 0.15], end=0.20, n=3, sent=1.8),  # good, ends at 2.0
    ]
    s = summarize(records, Slo(ttft_ms=100))
    assert s["requests"] == {"total": 6, "ok": 3, "failed": 2, "cancelled": 1}
    assert s["duration_s"] == pytest.approx(2.0)
    assert s["throughput"]["requests_per_s"] == pytest.approx(3 / 2.0)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(7 / 2.0)
    assert s["goodput"]["good"] == 2
    assert s["goodput"]["requests_per_s"] == pytest.approx(1.0)
    assert s["goodput"]["fraction"] == pytest.approx(2 / 5)  # cancelled are not judged
    assert s["failure_rate"] == pytest.approx(2 / 5)
    assert s["failures"]["http_status"] == 1 and s["failures"]["stream_error"] == 1
    assert s["http_statuses"] == {"429": 1}
    assert s["ttft_ms"]["count"] == 3 and s["ttft_ms"]["max"] == pytest.approx(300.0)
    assert s["itl_ms"]["count"] == 1 + 1 + 2


def test_per_tenant_rates_share_the_run_duration() -> None:
    records = [
        rec([0.1], end=0.2, n=1, sent=0.0, tenant="a"),
        rec([0.1], end=0.2, n=1, sent=1.8, tenant="b"),
        rec([0.1], end=0.2, n=1, sent=0.9, tenant="b"),
    ]
    s = summarize_run(records, Slo())
    assert set(s["per_tenant"]) == {"a", "b"}
    assert s["per_tenant"]["a"]["throughput"]["requests_per_s"] == pytest.approx(1 / 2.0)
    assert s["per_tenant"]["b"]["throughput"]["requests_per_s"] == pytest.approx(2 / 2.0)


def test_send_lag_and_peak_concurrency() -> None:
    records = [
        rec([0.1], end=1.0, sent=0.002, scheduled_s=0.0),
        rec([0.1], end=1.0, sent=0.503, scheduled_s=0.5),
        rec([0.1], end=1.0, sent=1.002, scheduled_s=1.0),
    ]
    s = summarize(records, Slo())
    assert s["send_lag_ms"]["max"] == pytest.approx(3.0)
    # [0.002, 1.002], [0.503, 1.503], [1.002, 2.002]: back-to-back is not overlap.
    assert peak_concurrency(records) == 2
