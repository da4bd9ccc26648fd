"""A short real run against a simulator produces a complete report with plots;
a sweep finds its highest rate; `bench compare` reads two reports."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.benchmark import BenchOptions, run_once, run_sweep
from bench.cli import register
from bench.metrics import DEFINITIONS, Slo


def main(argv: list[str]) -> int:
    """`switchyard bench ...` through this package's own `register`, so these tests
    do not depend on the other areas' subcommands."""
    import argparse

    parser = argparse.ArgumentParser(prog="switchyard")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def options(upstream: str, out_dir: Path, **run) -> BenchOptions:
    """A quiet run of model "m" at `upstream`, written to `out_dir`."""
    return BenchOptions(base_url=upstream, model="m", out_dir=out_dir, progress=False, **run)


def png_ok(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_writes_complete_report_with_plots(upstream: str, tmp_path: Path) -> None:
    o = options(
        upstream,
        tmp_path / "run",
        rate=100.0,
        num_requests=40,
        input_tokens=16,
        output_tokens=6,
        tenants=[("acme", "sk-a", 1.0), ("beta", "sk-b", 1.0)],
        cancel_rate=0.1,
        cancel_delay_s=0.002,
        extra_body={"sim": {"itl_ms": 2}},
        slo=Slo(ttft_ms=1000, tpot_ms=1000),
    )
    summary = run_once(o, o.rate, o.out_dir)
    doc = orjson.loads((o.out_dir / "result.json").read_bytes())
    assert doc["kind"] == "switchyard.bench.run"
    assert doc["definitions"] == DEFINITIONS
    assert len(doc["records"]) == 40
    assert all("sk-" not in str(t) for t in doc["config"]["tenants"])  # keys stay out of reports
    req = summary["requests"]
    assert req["ok"] + req["cancelled"] == 40 and req["failed"] == 0 and req["cancelled"] >= 1
    assert summary["output_tokens_source"] == "usage"
    assert summary["tpot_ms"]["count"] == req["ok"]
    assert set(summary["per_tenant"]) == {"acme", "beta"}
    assert summary["goodput"]["good"] == req["ok"]
    md = (o.out_dir / "summary.md").read_text()
    for needle in ("TTFT", "TPOT", "(e2e - TTFT) / (n - 1)", "goodput", "Per tenant", "latency_cdf.png"):
        assert needle in md
    for name in ("latency_cdf.png", "ttft_over_time.png", "itl_over_time.png"):
        assert png_ok(o.out_dir / name), name


def test_failures_show_up_by_kind(upstream: str, tmp_path: Path) -> None:
    o = options(
        upstream,
        tmp_path / "fail",
        concurrency=4,
        num_requests=8,
        output_tokens=6,
        extra_body={"sim": {"fail_after": 2}},
        plots=False,
    )
    summary = run_once(o, None, o.out_dir)
    assert summary["requests"]["failed"] == 8 and summary["failures"]["stream_error"] == 8
    assert summary["failure_rate"] == 1.0 and summary["goodput"]["good"] == 0


def test_sweep_finds_highest_rate_meeting_the_slo(upstream: str, tmp_path: Path) -> None:
    # A 30 ms TTFT on every request: SLO 20 ms is missed at every rate, 200 ms met at both.
    common = dict(rates=[20.0, 40.0], num_requests=12, output_tokens=4, extra_body={"sim": {"ttft_ms": 30}})
    doc = run_sweep(options(upstream, tmp_path / "ok", slo=Slo(ttft_ms=200), **common))
    assert doc["best_rate"] == 40.0 and [p["meets_slo"] for p in doc["points"]] == [True, True]
    assert png_ok(tmp_path / "ok" / "throughput_goodput_vs_rate.png")
    assert (tmp_path / "ok" / "rate-20" / "result.json").is_file()
    missed = run_sweep(options(upstream, tmp_path / "miss", slo=Slo(ttft_ms=20), plots=False, **common))
    assert missed["best_rate"] is None and len(missed["points"]) == 1  # stops at the first miss
    with pytest.raises(ValueError, match="SLO"):
        run_sweep(options(upstream, tmp_path / "x", **common))


def test_cli_run_and_compare(upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "bench",
        "run",
        "--base-url",
        upstream + "/v1",
        "--model",
        "m",
        "--num-requests",
        "10",
        "--output-tokens",
        "4",
        "--no-plots",
        "--concurrency",
        "2",
    ]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    assert main([*base, "--out", str(tmp_path / "b"), "--extra-body", '{"sim": {"ttft_ms": 20}}']) == 0
    capsys.readouterr()
    assert main(["bench", "compare", str(tmp_path / "a" / "result.json"), str(tmp_path / "b" / "result.json")]) == 0
    out = capsys.readouterr().out
    ttft_row = next(line for line in out.splitlines() if line.startswith("| TTFT p50"))
    assert ttft_row.rstrip().endswith("| A |")  # B added 20 ms: A is better
    assert main(["bench", "compare", str(tmp_path / "a" / "summary.md"), str(tmp_path / "b" / "result.json")]) == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rate", "1", "--trace", "x.jsonl"], "choose one of"),
        ([], "choose an arrival process"),
        (["--concurrency", "1", "--cancel-rate", "2"], "cancel-rate"),
        (["--rate", "0"], "--rate must be > 0"),
        (["--rate", "1", "--burstiness", "-1"], "--burstiness must be > 0"),
        (["--concurrency", "2", "--num-requests", "0"], "--num-requests must be > 0"),
    ],
)
def test_cli_rejects_bad_arguments(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "run", "--base-url", "http://127.0.0.1:1", "--model", "m", *args]) == 2
    assert message in capsys.readouterr().err
