"""The harness against the vLLM simulator's known timing: what it measures must
match what the simulator was told (TTFT 40 ms, one token every 10 ms, 6 tokens)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
        slo=Slo(ttft_ms=TTFT_MS + 100, tpot_ms=ITL_MS + 20),
        progress=False,
    )
    s = run_once(o, o.rate, o.out_dir)
    assert s["requests"]["ok"] == 12, s["failures"]
    assert s["output_tokens_source"] == "usage" and s["output_tokens"] == 12 * TOKENS
    # Loopback and a busy 2-core machine add a little; they never subtract.
    assert TTFT_MS <= s["ttft_ms"]["p50"] < TTFT_MS + 30
    assert ITL_MS * 0.8 <= s["itl_ms"]["p50"] < ITL_MS + 8
    assert ITL_MS * 0.8 <= s["tpot_ms"]["p50"] < ITL_MS + 8
    # One token per chunk; the last token is EOS, counted in usage but without text
    # (as real vLLM does), so 5 content chunks and 4 gaps per request.
    assert s["itl_ms"]["count"] == 12 * (TOKENS - 2)
    assert s["goodput"]["fraction"] == 1.0
    for name in ("latency_cdf.png", "ttft_over_time.png", "itl_over_time.png"):
        assert (tmp_path / name).stat().st_size > 1000
