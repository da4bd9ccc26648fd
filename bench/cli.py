"""`switchyard bench run` and `switchyard bench compare`."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import orjson

from bench.benchmark import BenchOptions, run_once, run_sweep
from bench.metrics import Slo
from bench.report import latency_table, summary_lines


def _floats(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError("rates must be positive numbers")
    return vals


def _tenant(text: str) -> tuple[str, str, float]:
    """NAME=KEY[@WEIGHT]; KEY may be env:VAR so keys stay off the command line."""
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--tenant wants NAME=KEY[@WEIGHT], got {text!r}")
    key, _, weight = rest.partition("@")
    if key.startswith("env:"):
        key = os.environ.get(key[4:], "")
        if not key:
            raise argparse.ArgumentTypeError(f"--tenant {name}: environment variable {rest[4:].split('@')[0]} is empty")
    try:
        w = float(weight) if weight else 1.0
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tenant {name}: weight {weight!r} is not a number") from None
    return name, key, w


def _json_object(text: str) -> dict:
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--extra-body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("--extra-body must be a JSON object")
    return obj


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", required=True, help="server root or .../v1")
    p.add_argument("--model", required=True)
    p.add_argument("--out", type=Path, help="report folder (default reports/bench/<time>)")
    g = p.add_argument_group("arrivals (pick one)")
    g.add_argument("--rate", type=float, help="open loop: mean requests/s")
    g.add_argument("--rates", type=_floats, help="sweep: comma-separated rates; finds the highest meeting the SLO")
    g.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        help="gamma shape of inter-arrival gaps: 1 Poisson, <1 burstier, >1 more regular",
    )
    g.add_argument("--concurrency", type=int, help="closed loop; with --rate, a cap on in-flight requests")
    g.add_argument(
        "--duration-s",
        type=float,
        help="closed loop: stop starting requests after this long (--num-requests is then an upper bound)",
    )
    g.add_argument("--trace", type=Path, help="replay a JSONL trace with 'timestamp' (s) or 'timestamp_ms'")
    g.add_argument("--time-scale", type=float, default=1.0, help="trace replay speed factor on gaps")
    w = p.add_argument_group("workload")
    w.add_argument("--num-requests", type=int, default=100, help="sessions (conversations when --turns > 1)")
    w.add_argument(
        "--input-tokens",
        type=int,
        default=128,
        help="prompt size in tokens of the target's tokenizer (see --tokenizer)",
    )
    w.add_argument("--output-tokens", type=int, default=64, help="max_tokens per request")
    w.add_argument("--range-ratio", type=float, default=0.0, help="lengths uniform in L*(1-r)..L*(1+r)")
    w.add_argument("--prefixes", type=int, default=0, help="shared-prefix workload: number of prefixes")
    w.add_argument("--suffixes-per-prefix", type=int, default=1)
    w.add_argument("--prefix-tokens", type=int, default=256)
    w.add_argument("--turns", type=int, default=1, help="multi-turn conversations of this many turns")
    w.add_argument("--think-time-ms", type=float, default=0.0)
    w.add_argument("--prompts", type=Path, help="JSONL of prompts ('prompt' | 'messages' | 'turns')")
    w.add_argument(
        "--tokenizer",
        type=Path,
        help="a tokenizer.json (or its directory) to size prompts with when the target has no /tokenize endpoint "
        "(needs the `tokenizers` library); with neither, --input-tokens counts words and reports say ESTIMATE",
    )
    w.add_argument(
        "--tenant",
        dest="tenants",
        action="append",
        type=_tenant,
        default=[],
        help="NAME=KEY[@WEIGHT] (KEY may be env:VAR); repeat for several tenants",
    )
    r = p.add_argument_group("requests")
    r.add_argument("--no-stream", dest="stream", action="store_false")
    r.add_argument("--ignore-eos", action="store_true", help="send ignore_eos so outputs reach max_tokens")
    r.add_argument("--extra-body", type=_json_object, default={}, help="JSON merged into every request body")
    r.add_argument("--timeout-s", type=float, default=300.0)
    r.add_argument("--cancel-rate", type=float, default=0.0, help="fraction of requests the client abandons")
    r.add_argument("--cancel-delay-ms", type=float, default=500.0)
    s = p.add_argument_group("SLOs and goodput")
    s.add_argument("--slo-ttft-ms", type=float)
    s.add_argument("--slo-tpot-ms", type=float)
    s.add_argument("--slo-e2e-ms", type=float)
    s.add_argument("--slo-attainment", type=float, default=0.95, help="sweep: fraction of good requests needed")
    s.add_argument("--sweep-all", action="store_true", help="sweep every rate, not stop at the first miss")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--no-plots", dest="plots", action="store_false")


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    chosen = [n for n in ("rate", "rates", "trace") if getattr(args, n) is not None]
    if len(chosen) > 1:
        raise ValueError(f"choose one of --rate, --rates, --trace (got {', '.join('--' + c for c in chosen)})")
    if not chosen and not args.concurrency:
        raise ValueError("choose an arrival process: --rate, --rates, --trace or --concurrency")
    if args.concurrency is not None and args.concurrency < 1:
        raise ValueError("--concurrency must be >= 1")
    positive = {
        "--rate": args.rate,
        "--burstiness": args.burstiness,
        "--time-scale": args.time_scale,
        "--duration-s": args.duration_s,
        "--timeout-s": args.timeout_s,
        "--num-requests": args.num_requests,
    }
    for flag, value in positive.items():
        if value is not None and value <= 0:
            raise ValueError(f"{flag} must be > 0 (got {value:g})")
    if args.cancel_delay_ms < 0 or args.think_time_ms < 0:
        raise ValueError("--cancel-delay-ms and --think-time-ms must be >= 0")
    if not 0.0 <= args.cancel_rate <= 1.0:
        raise ValueError("--cancel-rate must be within [0, 1]")
    out = args.out or Path("reports/bench") / time.strftime("%Y%m%d-%H%M%S")
    # Options the command line names alike are taken as they are; the rest are converted here.
    given = vars(args)
    alike = {f.name: given[f.name] for f in dataclasses.fields(BenchOptions) if f.name in given}
    return BenchOptions(
        **{
            **alike,
            "out_dir": out,
            "rates": args.rates or [],
            "think_time_s": args.think_time_ms / 1000.0,
            "cancel_delay_s": args.cancel_delay_ms / 1000.0,
            "slo": Slo(args.slo_ttft_ms, args.slo_tpot_ms, args.slo_e2e_ms),
            "progress": args.progress and sys.stderr.isatty(),
        }
    )


def cmd_run(args: argparse.Namespace) -> int:
    try:
        o = options_from_args(args)
        if o.rates:
            doc = run_sweep(o)
            best = doc["best_rate"]
            print(f"highest rate meeting the SLO: {best:g} req/s" if best is not None else "no rate met the SLO")
            print(f"report: {o.out_dir / 'sweep.md'}")
            return 0
        summary = run_once(o, o.rate, o.out_dir)
    except (ValueError, OSError) as exc:
        print(f"switchyard bench: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(summary) + [""] + latency_table(summary)))
    print(f"report: {o.out_dir / 'summary.md'}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from bench.compare import render

    try:
        print(render(args.a, args.b), end="")
    except ValueError as exc:
        print(f"switchyard bench compare: {exc}", file=sys.stderr)
        return 2
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="load tests: TTFT/ITL/TPOT/goodput reports with plots")
    sub = bench.add_subparsers(dest="bench_command", required=True)
    run = sub.add_parser("run", help="run a load test against an OpenAI-compatible server")
    add_run_arguments(run)
    run.set_defaults(func=cmd_run)
    cmp_ = sub.add_parser("compare", help="compare two result.json (or two sweep.json) files")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    cmp_.set_defaults(func=cmd_compare)
