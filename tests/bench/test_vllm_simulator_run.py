"""The harness against the vLLM simulator's known timing: what it measures must
match what the simulator was told (TTFT 40 ms, one token every 10 ms, 6 tokens), as
floors a busy machine cannot break, and the summary must report the times recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from statistics import median

import orjson
import pytest

from bench.benchmark import BenchOptions, run_once
from bench.metrics import Slo
from simulators.testing import start_simulator

TTFT_MS, ITL_MS, TOKENS = 40.0, 10.0, 6


@pytest.fixture(scope="module")
def vllm_sim() -> Iterator[str]:
    with start_simulator("vllm", ttft_ms=TTFT_MS, itl_ms=ITL_MS, output_tokens=TOKENS) as sim:
        yield sim.url


def test_measured_timing_matches_the_simulator(vllm_sim: str, tmp_path: Path) -> None:
    o = BenchOptions(
        base_url=vllm_sim,
        model="sim-model",
        out_dir=tmp_path,
        rate=20.0,
        num_requests=12,
        input_tokens=32,
        output_tokens=64,
        slo=Slo(ttft_ms=TTFT_MS - 1),  # below what the simulator can do: no request meets it
        progress=False,
    )
    s = run_once(o, o.rate, o.out_dir)
    assert s["requests"]["ok"] == 12, s["failures"]
    assert s["output_tokens_source"] == "usage" and s["output_tokens"] == 12 * TOKENS
    records = orjson.loads((tmp_path / "result.json").read_bytes())["records"]
    first, gaps, tpots = [], [], []
    for r in records:
        # One token per chunk; the last token is EOS, counted in usage but without text
        # (as real vLLM does), so 5 content chunks and 4 gaps per request.
        times = r["chunk_times"]
        assert len(times) == TOKENS - 1 and times == sorted(times) and r["end_s"] >= times[-1]
        # The simulator waits TTFT, then ITL per token: a busy machine only adds to what the
        # client sees, so these floors hold whatever the load (and no ceiling does).
        assert times[0] >= TTFT_MS / 1000 and times[-1] >= (TTFT_MS + (TOKENS - 2) * ITL_MS) / 1000
        first.append(times[0])
        gaps += [b - a for a, b in zip(times, times[1:])]
        tpots.append((r["end_s"] - times[0]) / (TOKENS - 1))
    # The summary reports those very times, in milliseconds.
    assert s["ttft_ms"]["p50"] == pytest.approx(1000 * median(first))
    assert s["itl_ms"]["count"] == 12 * (TOKENS - 2) and s["itl_ms"]["p50"] == pytest.approx(1000 * median(gaps))
    assert s["tpot_ms"]["p50"] == pytest.approx(1000 * median(tpots))
    assert s["goodput"]["good"] == 0 and s["goodput"]["fraction"] == 0.0
    for name in ("latency_cdf.png", "ttft_over_time.png", "itl_over_time.png"):
        assert (tmp_path / name).stat().st_size > 1000
