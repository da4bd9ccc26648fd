"""`python -m bench.overhead` end to end on tiny numbers, and wrk output parsing."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench import wrk
from bench.overhead import main

WRK_OUTPUT = """Running 2s test @ http://127.0.0.1:9/v1/chat/completions
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     6.80ms    3.10ms  52.57ms   91.00%
    Req/Sec     2.10k   100.00     2.30k    70.00%
  Latency Distribution
     50%    6.40ms
     75%    7.00ms
     90%  850.00us
     99%    1.20s
  4200 requests in 2.01s, 3.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 5
Requests/sec:   2089.55
Transfer/sec:      1.49MB
"""


def test_wrk_output_is_parsed_with_units() -> None:
    r = wrk.parse(WRK_OUTPUT)
    assert r.requests == 4200 and r.duration_s == pytest.approx(2.01)
    assert r.requests_per_s == pytest.approx(2089.55)
    assert r.latency_ms == pytest.approx({"p50": 6.4, "p90": 0.85, "p99": 1200.0})
    assert r.errors == 2 + 1 + 5
    with pytest.raises(ValueError):
        wrk.parse("garbage")


def test_lua_body_cannot_be_closed_early() -> None:
    script = wrk.lua_post(b'{"content": "a]]b]=]c"}')
    assert 'wrk.body = [==[{"content": "a]]b]=]c"}]==]' in script


def test_overhead_run_writes_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "overhead"
    assert (
        main(
            [
                "--requests",
                "60",
                "--rounds",
                "1",
                "--warmup",
                "10",
                "--duration-s",
                "0.3",
                "--no-wrk",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    doc = orjson.loads((out / "overhead.json").read_bytes())
    assert [r["scenario"] for r in doc["latency"]] == [
        "non-streaming, concurrency 1",
        "16-chunk streaming, concurrency 1",
    ]
    for r in doc["latency"]:
        assert r["direct"]["failed"] == r["gateway"]["failed"] == 0
        assert r["gateway"]["e2e_p50_ms"] > 0 and r["gateway"]["added_p50_ms"] == pytest.approx(
            r["gateway"]["e2e_p50_ms"] - r["direct"]["e2e_p50_ms"]
        )
    assert all(r["direct"]["requests_per_s"] > 0 and r["gateway"]["requests_per_s"] > 0 for r in doc["throughput"])
    assert len(doc["targets"]) == 5  # issue 2's three, and /v1/responses next to chat for both scenarios
    for r in doc["responses"]:
        for path in ("direct chat", "gateway chat", "gateway responses"):
            assert r[path]["failed"] == 0 and r[path]["e2e_p50_ms"] > 0
        assert r["responses_minus_chat_p50_ms"] == pytest.approx(
            r["gateway responses"]["e2e_p50_ms"] - r["gateway chat"]["e2e_p50_ms"]
        )
    printed = capsys.readouterr().out
    assert "added p50" in printed and "| non-streaming, concurrency 1 | gateway |" in printed
    assert (out / "nonstream-c1-gateway" / "result.json").is_file()


def test_only_the_responses_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "overhead"
    assert main(["--only", "responses", "--requests", "30", "--rounds", "1", "--warmup", "5", "--out", str(out)]) == 0
    doc = orjson.loads((out / "overhead.json").read_bytes())
    assert doc["latency"] == [] and doc["throughput"] == []  # neither the chat rows nor wrk ran
    assert [r["scenario"] for r in doc["responses"]] == ["non-streaming", "16-chunk streaming"]
    assert [t["target"].startswith("/v1/responses adds within") for t in doc["targets"]] == [True, True]
    printed = capsys.readouterr().out
    assert "| non-streaming | gateway responses |" in printed and "| latency, concurrency 1 |" not in printed
