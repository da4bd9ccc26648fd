"""Writes a run's report: result.json (config, summary, definitions, every request's
record), summary.md (the same numbers for people, formulas included) and plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.metrics import DEFINITIONS, PERCENTILES
from bench.plot_context import PlotContext
from bench.records import FAILURE_KINDS, RequestRecord

RUN_KIND = "switchyard.bench.run"
SWEEP_KIND = "switchyard.bench.sweep"


SIZED_BY = {
    "endpoint": "sized with the target's /tokenize",
    "tokenizer": "sized with --tokenizer",
    "estimate": "ESTIMATE: words",
}


def run_parameters(config: dict[str, Any]) -> str:
    """One line for plot titles: the target, the arrivals, the request count and
    the sizes (with how the input was sized)."""
    sizing = config.get("input_sizing") or {}
    if sizing.get("method") == "given":
        inputs = "prompts as given"
    else:
        how = SIZED_BY.get(sizing.get("method", "estimate"), "ESTIMATE: words")
        inputs = f"input {config.get('input_tokens')} tok ({how})"
    parts = [
        f"{config.get('model')} @ {config.get('base_url')}",
        str(config.get("mode", "")),
        f"{config.get('num_requests')} requests",
        inputs,
        f"output <= {config.get('output_tokens')} tok",
    ]
    return " · ".join(p for p in parts if p)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def run_document(config: dict[str, Any], summary: dict[str, Any], records: Sequence[RequestRecord]) -> dict[str, Any]:
    return {
        "kind": RUN_KIND,
        "version": 1,
        "config": config,
        "definitions": DEFINITIONS,
        "summary": summary,
        "records": [r.to_dict() for r in records],
    }


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def latency_table(summary: dict[str, Any]) -> list[str]:
    head = "| metric (ms) | count | mean | " + " | ".join(f"p{p}" for p in PERCENTILES) + " | max |"
    lines = [head, "|" + "---|" * (4 + len(PERCENTILES))]
    for key, label in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"), ("e2e_ms", "e2e")):
        d = summary[key]
        lines.append(
            f"| {label} | {d['count']} | {_fmt(d['mean'])} | "
            + " | ".join(_fmt(d[f"p{p}"]) for p in PERCENTILES)
            + f" | {_fmt(d['max'])} |"
        )
    return lines


def input_lines(summary: dict[str, Any]) -> list[str]:
    """The prompt size asked for, how it was sized, and what the server counted
    (`usage.prompt_tokens`), side by side; an estimate says so in capitals."""
    sizing = summary.get("input_sizing")
    prompt = summary.get("prompt_tokens") or {}
    measured = prompt.get("measured_mean")
    seen = (
        f"measured mean prompt_tokens {measured:.1f} (usage; the chat template included)"
        if measured is not None
        else "no usage.prompt_tokens reported, so the real size is unknown"
    )
    if sizing is None:
        return [f"- input tokens: {seen}"]
    if sizing["method"] == "given":
        return [f"- input tokens: {sizing['description']}; {seen}"]
    if sizing["estimate"]:
        return [
            f"- input tokens: target {sizing['target']}, an ESTIMATE: {sizing['description']}; {seen}",
        ]
    sized = prompt.get("sized_mean")
    sized_text = f", mean {sized:.1f} as sized" if sized is not None else ""
    return [f"- input tokens: target {sizing['target']}, sized with {sizing['description']}{sized_text}; {seen}"]


def summary_lines(summary: dict[str, Any]) -> list[str]:
    req, tp, gp = summary["requests"], summary["throughput"], summary["goodput"]
    lines = [
        f"- requests: {req['total']} total, {req['ok']} ok, {req['failed']} failed, {req['cancelled']} cancelled "
        f"(failure rate {summary['failure_rate']:.2%})",
        f"- duration: {summary['duration_s']:.3f} s; peak concurrency {summary['peak_concurrency']}",
        f"- throughput: {tp['requests_per_s']:.2f} requests/s, {tp['output_tokens_per_s']:.1f} output tokens/s"
        + (f", {tp['input_tokens_per_s']:.1f} input tokens/s" if tp["input_tokens_per_s"] is not None else ""),
        *input_lines(summary),
        f"- output tokens counted from: {summary['output_tokens_source'] or '-'}",
        f"- goodput (SLO {', '.join(f'{k} <= {v:g}' for k, v in gp['slo'].items() if v is not None) or 'none'}): "
        f"{gp['good']} good, {gp['requests_per_s']:.2f} requests/s, {gp['fraction']:.2%} of judged requests",
    ]
    fails = {k: v for k, v in summary["failures"].items() if v}
    if fails:
        lines.append(
            "- failures by kind: "
            + ", ".join(f"{k} {v}" for k, v in fails.items())
            + (f" (HTTP statuses: {summary['http_statuses']})" if summary["http_statuses"] else "")
        )
    if summary.get("cache_hit_pct") is not None:
        lines.append(f"- prompt cache hit: {summary['cache_hit_pct']:.1f}%")
    lag = summary.get("send_lag_ms")
    if lag:
        lines.append(
            f"- open-loop send lag: p50 {_fmt(lag['p50'], 3)} ms, p99 {_fmt(lag['p99'], 3)} ms, "
            f"max {_fmt(lag['max'], 3)} ms"
        )
    return lines


def markdown(config: dict[str, Any], summary: dict[str, Any], plots: Sequence[str]) -> str:
    out = ["# Switchyard load test", "", "## Run", ""]
    out += [f"- {k}: `{v}`" for k, v in config.items() if v not in (None, [], {}, "")]
    out += ["", "## Results", ""] + summary_lines(summary) + [""] + latency_table(summary)
    tenants = summary.get("per_tenant") or {}
    if len(tenants) > 1:
        out += ["", "## Per tenant", ""]
        out += [
            "| tenant | ok | failed | requests/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | e2e p99 | goodput |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, s in tenants.items():
            out.append(
                f"| {name} | {s['requests']['ok']} | {s['requests']['failed']} | "
                f"{s['throughput']['requests_per_s']:.2f} | {_fmt(s['ttft_ms']['p50'])} | "
                f"{_fmt(s['ttft_ms']['p99'])} | {_fmt(s['tpot_ms']['p50'])} | {_fmt(s['tpot_ms']['p99'])} | "
                f"{_fmt(s['e2e_ms']['p99'])} | {s['goodput']['fraction']:.2%} |"
            )
    if plots:
        out += ["", "## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots]
    out += ["", "## Definitions", ""] + [f"- **{k}**: {v}" for k, v in DEFINITIONS.items()]
    out += ["", f"Failure kinds: {', '.join(FAILURE_KINDS)}.", ""]
    return "\n".join(out)


def write_run(
    out_dir: Path,
    config: dict[str, Any],
    summary: dict[str, Any],
    records: Sequence[RequestRecord],
    plots: PlotContext | None = None,
) -> Path:
    """The reports, with plots when `plots` (their titles' parameters and SLO) is given."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    if plots is not None:
        from bench.plots import run_plots  # matplotlib is slow to import; only when drawing

        names = [p.name for p in run_plots(records, out_dir, plots)]
    write_json(out_dir / "result.json", run_document(config, summary, records))
    (out_dir / "summary.md").write_text(markdown(config, summary, names))
    return out_dir / "result.json"
