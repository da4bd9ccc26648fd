"""One benchmark run or a rate sweep, from options to written reports.

The CLI (bench/cli.py) only parses arguments into `BenchOptions`; this module
builds the workload and arrivals, runs them and writes the reports.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import arrivals as arr
from bench import workloads as wl
from bench.client import Client, ClientConfig
from bench.metrics import Slo, summarize_run
from bench.plot_context import PlotContext
from bench.progress import Progress
from bench.records import RequestRecord
from bench.report import SWEEP_KIND, input_lines, run_parameters, write_json, write_run
from bench.runner import LoadPlan, Runner
from bench.sizing import PromptSizer
from bench.token_count import choose_counter


@dataclass(slots=True)
class BenchOptions:
    base_url: str
    model: str
    out_dir: Path
    # arrivals: exactly one of rate / rates / concurrency / trace decides the loop
    rate: float | None = None
    rates: list[float] = field(default_factory=list)
    burstiness: float = 1.0
    concurrency: int | None = None  # closed loop; with a rate, a cap on the open loop
    duration_s: float | None = None  # closed loop: stop starting sessions after this long
    trace: Path | None = None
    time_scale: float = 1.0
    # workload
    num_requests: int = 100
    input_tokens: int = 128
    output_tokens: int = 64
    range_ratio: float = 0.0
    prefixes: int = 0
    suffixes_per_prefix: int = 1
    prefix_tokens: int = 256
    turns: int = 1
    think_time_s: float = 0.0
    prompts: Path | None = None
    tokenizer: Path | None = None  # a tokenizer.json (or its directory) when the target has no /tokenize
    tenants: list[tuple[str, str, float]] = field(default_factory=list)  # name, key, weight
    # request shape and behaviour
    stream: bool = True
    ignore_eos: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 300.0
    cancel_rate: float = 0.0
    cancel_delay_s: float = 0.5
    # judging
    slo: Slo = field(default_factory=Slo)
    slo_attainment: float = 0.95  # a sweep rate "meets the SLO" if this fraction is good
    sweep_all: bool = False  # keep sweeping past the first rate that misses
    seed: int = 0
    progress: bool = True
    plots: bool = True

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["slo"] = self.slo.as_dict()
        d["out_dir"] = str(self.out_dir)
        d["tenants"] = [{"name": n, "weight": w} for n, _, w in self.tenants]  # never write keys
        for k in ("trace", "prompts", "tokenizer"):
            d[k] = str(d[k]) if d[k] is not None else None
        return d


def prompt_sizer(o: BenchOptions) -> PromptSizer:
    """Counts tokens as the target does when it can (its /tokenize, else --tokenizer);
    a workload of given prompts needs no sizing."""
    if o.prompts is not None:
        return PromptSizer()
    keys = [k for _, k, _ in o.tenants if k]
    headers = {"Authorization": f"Bearer {keys[0]}"} if keys else {}
    return PromptSizer(choose_counter(o.base_url, o.model, o.tokenizer, headers))


def input_sizing(o: BenchOptions, sizer: PromptSizer) -> dict[str, Any]:
    """How the prompts were sized, for the reports."""
    if o.prompts is not None:
        return {
            "target": None,
            "method": "given",
            "description": f"prompts from {o.prompts}, sent as written",
            "estimate": False,
        }
    return {
        "target": o.input_tokens,
        "method": sizer.method.kind,
        "description": sizer.method.description,
        "estimate": sizer.method.estimate,
    }


def build_sessions(o: BenchOptions, sizer: PromptSizer | None = None) -> tuple[list[float] | None, list[wl.Session]]:
    """The workload, plus the trace's arrivals when replaying one."""
    stamps: list[float] | None = None
    if o.trace is not None:
        raw, sessions = wl.trace_file(o.trace, o.input_tokens, o.output_tokens, seed=o.seed, sizer=sizer)
        stamps = arr.trace_arrivals(raw, o.time_scale)
    elif o.prompts is not None:
        sessions = wl.prompts_file(o.prompts, o.output_tokens, o.num_requests)
    elif o.prefixes > 0:
        sessions = wl.shared_prefix(
            o.prefixes,
            o.suffixes_per_prefix,
            o.prefix_tokens,
            o.input_tokens,
            o.output_tokens,
            seed=o.seed,
            sizer=sizer,
        )
    else:
        sessions = wl.synthetic(
            o.num_requests,
            o.input_tokens,
            o.output_tokens,
            o.range_ratio,
            turns=o.turns,
            think_time_s=o.think_time_s,
            seed=o.seed,
            sizer=sizer,
        )
    wl.assign_tenants(sessions, [(n, w) for n, _, w in o.tenants], seed=o.seed)
    return stamps, sessions


def plan_for(o: BenchOptions, rate: float | None, sizer: PromptSizer | None = None) -> LoadPlan:
    stamps, sessions = build_sessions(o, sizer)
    if stamps is not None:
        arrivals: list[float] | None = stamps
    elif rate is not None:
        arrivals = arr.gamma_arrivals(len(sessions), rate, o.burstiness, seed=o.seed)
    else:
        arrivals = None
    return LoadPlan(
        sessions=sessions,
        arrivals=arrivals,
        concurrency=o.concurrency,
        cancel_rate=o.cancel_rate,
        cancel_delay_s=o.cancel_delay_s,
        seed=o.seed,
        duration_s=o.duration_s if arrivals is None else None,
    )


def client_config(o: BenchOptions) -> ClientConfig:
    return ClientConfig(
        base_url=o.base_url,
        model=o.model,
        stream=o.stream,
        timeout_s=o.timeout_s,
        api_keys={n: k for n, k, _ in o.tenants if k},
        ignore_eos=o.ignore_eos,
        extra_body=o.extra_body,
    )


async def execute(o: BenchOptions, plan: LoadPlan, label: str = "") -> list[RequestRecord]:
    progress = Progress(plan.total_requests, label=label, enabled=o.progress)
    async with Client(client_config(o)) as client:
        return await Runner(client, plan, progress).run()


def run_once(
    o: BenchOptions, rate: float | None, out_dir: Path, label: str = "", sizer: PromptSizer | None = None
) -> dict[str, Any]:
    sizer = sizer or prompt_sizer(o)
    plan = plan_for(o, rate, sizer)
    records = asyncio.run(execute(o, plan, label))
    summary = summarize_run(records, o.slo)
    summary["input_sizing"] = input_sizing(o, sizer)
    config = {**o.describe(), "offered_rate": rate, "mode": _mode(o, rate), "input_sizing": summary["input_sizing"]}
    plots = PlotContext(run_parameters(config), o.slo) if o.plots else None
    write_run(out_dir, config, summary, records, plots)
    return summary


def _mode(o: BenchOptions, rate: float | None) -> str:
    if o.trace is not None:
        return f"trace replay (x{o.time_scale:g})"
    if rate is not None:
        kind = "poisson" if o.burstiness == 1 else f"gamma (burstiness {o.burstiness:g})"
        cap = f", concurrency cap {o.concurrency}" if o.concurrency else ""
        return f"open loop, {kind} at {rate:g} req/s{cap}"
    limit = f", for at most {o.duration_s:g} s" if o.duration_s else ""
    return f"closed loop, concurrency {o.concurrency}{limit}"


def meets_slo(summary: dict[str, Any], attainment: float) -> bool:
    return summary["requests"]["ok"] > 0 and summary["goodput"]["fraction"] >= attainment


def run_sweep(o: BenchOptions) -> dict[str, Any]:
    if o.slo.empty:
        raise ValueError("a sweep needs at least one SLO (--slo-ttft-ms, --slo-tpot-ms, --slo-e2e-ms)")
    points = []
    best: float | None = None
    sizer = prompt_sizer(o)  # sized once: every rate sends the same prompts
    for rate in sorted(o.rates):
        summary = run_once(o, rate, o.out_dir / f"rate-{rate:g}", label=f"{rate:g} req/s ", sizer=sizer)
        ok = meets_slo(summary, o.slo_attainment)
        points.append({"rate": rate, "meets_slo": ok, "summary": summary, "result": f"rate-{rate:g}/result.json"})
        print(
            f"rate {rate:g} req/s: goodput {summary['goodput']['fraction']:.1%} -> "
            f"{'meets' if ok else 'misses'} the SLO",
            file=sys.stderr,
        )
        if ok:
            best = rate
        elif not o.sweep_all:
            break
    config = {**o.describe(), "input_sizing": input_sizing(o, sizer)}
    doc = {
        "kind": SWEEP_KIND,
        "version": 1,
        "config": config,
        "slo_attainment": o.slo_attainment,
        "best_rate": best,
        "points": points,
    }
    o.out_dir.mkdir(parents=True, exist_ok=True)
    plots: list[Path] = []
    if o.plots:
        from bench.plots import sweep_plots

        rates = ",".join(f"{r:g}" for r in sorted(o.rates))
        context = PlotContext(run_parameters({**config, "mode": f"rate sweep {rates} req/s"}), o.slo)
        plots = sweep_plots(points, o.out_dir, context)
    write_json(o.out_dir / "sweep.json", doc)
    (o.out_dir / "sweep.md").write_text(sweep_markdown(doc, [p.name for p in plots]))
    return doc


def _mean_prompt(points: list[dict[str, Any]]) -> dict[str, float | None]:
    """Sized and measured mean prompt tokens over every rate of a sweep."""
    out: dict[str, float | None] = {}
    for key in ("measured_mean", "sized_mean"):
        pairs = [
            (p["summary"]["prompt_tokens"][key], p["summary"]["requests"]["ok"])
            for p in points
            if p["summary"]["prompt_tokens"][key] is not None
        ]
        weight = sum(n for _, n in pairs)
        out[key] = sum(v * n for v, n in pairs) / weight if weight else None
    return out


def sweep_markdown(doc: dict[str, Any], plots: list[str]) -> str:
    slo = ", ".join(f"{k} <= {v:g}" for k, v in doc["config"]["slo"].items() if v is not None)
    best = doc["best_rate"]
    lines = [
        "# Switchyard rate sweep",
        "",
        f"SLO: {slo}; a rate meets it when at least {doc['slo_attainment']:.0%} of requests are good "
        "(succeeded and met every SLO).",
        "",
        f"**Highest rate meeting the SLO: {best:g} req/s**" if best is not None else "**No rate met the SLO.**",
        "",
        *input_lines({"input_sizing": doc["config"]["input_sizing"], "prompt_tokens": _mean_prompt(doc["points"])}),
        "",
        "| offered req/s | served req/s | goodput req/s | good % | TTFT p99 ms | TPOT p99 ms | e2e p99 ms | failed | meets |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in doc["points"]:
        s = p["summary"]

        def f(v: Any) -> str:
            return "-" if v is None else f"{v:.1f}"

        lines.append(
            f"| {p['rate']:g} | {s['throughput']['requests_per_s']:.2f} | {s['goodput']['requests_per_s']:.2f} "
            f"| {s['goodput']['fraction']:.1%} | {f(s['ttft_ms']['p99'])} | {f(s['tpot_ms']['p99'])} "
            f"| {f(s['e2e_ms']['p99'])} | {s['requests']['failed']} | {'yes' if p['meets_slo'] else 'no'} |"
        )
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots]
    lines += ["", "Each rate's full report (with definitions) is in its `rate-*/` folder.", ""]
    return "\n".join(lines)
