"""PNG plots for a run (latency CDFs, TTFT and ITL over time) and a sweep
(throughput and goodput against offered rate).

Every figure's title carries the run's parameters (`PlotContext.parameters`)
and its SLO (bench/report.py builds it), and every latency axis an SLO was given for has the SLO drawn as a
dashed line, so a plot read on its own says what was measured and against
what. Figures are built as objects (`run_figures`, `sweep_figures`), without
pyplot's global state, and then written."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench.metrics import request_metrics
from bench.plot_context import PlotContext
from bench.records import RequestRecord


def slo_line(ax: Axes, value: float | None, name: str, vertical: bool) -> None:
    if value is None:
        return
    label = f"{name} SLO {value:g} ms"
    if vertical:
        ax.axvline(value, label=label, color="red", linestyle="--", linewidth=1)
    else:
        ax.axhline(value, label=label, color="red", linestyle="--", linewidth=1)
    ax.legend(loc="best", fontsize=7)


def cdf_lines(ax: Axes, series: dict[str, list[float]], title: str, slo_ms: float | None, slo_name: str) -> None:
    """One empirical CDF per labelled series (ms) on `ax`, with the SLO as a dashed line
    (the bake-off overlays its candidates this way)."""
    ax.set_title(title)
    ax.set_xlabel("ms")
    ax.set_ylabel("fraction of requests" if "ITL" not in title else "fraction of gaps")
    ax.grid(True, alpha=0.3)
    drawn = False
    for label, values_ms in series.items():
        if values_ms:
            vals = sorted(values_ms)
            n = len(vals)
            ax.step(vals, [(i + 1) / n for i in range(n)], where="post", label=label or None)
            drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    slo_line(ax, slo_ms, slo_name, vertical=True)
    if drawn and any(series) and not ax.get_legend():
        ax.legend(loc="best", fontsize=7)


def _cdf(ax: Axes, values_ms: list[float], title: str, slo_ms: float | None, slo_name: str) -> None:
    cdf_lines(ax, {"": values_ms}, title, slo_ms, slo_name)


def run_figures(records: Sequence[RequestRecord], ctx: PlotContext) -> dict[str, Figure]:
    pairs = [(r, m) for r in records if (m := request_metrics(r)) is not None]
    slo = ctx.slo
    figures: dict[str, Figure] = {}

    fig = Figure(figsize=(10, 8))
    axes = fig.subplots(2, 2)
    ttfts = [m.ttft_s * 1000 for _, m in pairs if m.ttft_s is not None]
    _cdf(axes[0][0], ttfts, "TTFT CDF", slo.ttft_ms, "TTFT")
    tpots = [m.tpot_s * 1000 for _, m in pairs if m.tpot_s is not None]
    _cdf(axes[0][1], tpots, "TPOT CDF", slo.tpot_ms, "TPOT")
    _cdf(axes[1][0], [g * 1000 for _, m in pairs for g in m.itls_s], "ITL CDF", None, "ITL")
    e2es = [m.e2e_s * 1000 for _, m in pairs]
    _cdf(axes[1][1], e2es, "e2e latency CDF", slo.e2e_ms, "e2e")
    fig.suptitle(ctx.title("Latency CDFs"), fontsize=9)
    figures["latency_cdf.png"] = fig

    fig = Figure(figsize=(9, 4.8))
    ax = fig.subplots()
    for tenant in sorted({r.tenant for r, _ in pairs}):
        pts = [(r.sent_s, m.ttft_s * 1000) for r, m in pairs if r.tenant == tenant and m.ttft_s is not None]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=6, label=tenant)
    failed = [r.sent_s for r in records if r.outcome == "failed"]
    if failed:
        ax.scatter(failed, [0.0] * len(failed), marker="x", color="red", label="failed (at send time)")
    ax.set_title(ctx.title("TTFT over time"), fontsize=9)
    ax.set_xlabel("send time (s from start)")
    ax.set_ylabel("TTFT (ms)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=7)
    slo_line(ax, slo.ttft_ms, "TTFT", vertical=False)
    figures["ttft_over_time.png"] = fig

    fig = Figure(figsize=(9, 4.8))
    ax = fig.subplots()
    xs, ys = [], []
    for r, m in pairs:
        for t, gap in zip(r.chunk_times[1:], m.itls_s):
            xs.append(r.sent_s + t)
            ys.append(gap * 1000)
    ax.scatter(xs, ys, s=2)
    ax.set_title(ctx.title("ITL over time"), fontsize=9)
    ax.set_xlabel("chunk arrival (s from start)")
    ax.set_ylabel("gap to previous content chunk (ms)")
    ax.grid(True, alpha=0.3)
    # TPOT is the mean gap per token, so its SLO is the reference level for single gaps.
    slo_line(ax, slo.tpot_ms, "TPOT", vertical=False)
    figures["itl_over_time.png"] = fig
    return laid_out(figures)


def sweep_figures(points: Sequence[dict[str, Any]], ctx: PlotContext) -> dict[str, Figure]:
    """points: {"rate", "summary"} per offered rate, in order."""
    rates = [p["rate"] for p in points]
    rps = [p["summary"]["throughput"]["requests_per_s"] for p in points]
    good = [p["summary"]["goodput"]["requests_per_s"] for p in points]
    toks = [p["summary"]["throughput"]["output_tokens_per_s"] for p in points]
    figures: dict[str, Figure] = {}

    fig = Figure(figsize=(7.5, 5.2))
    ax = fig.subplots()
    ax.plot(rates, rps, marker="o", label="throughput (requests/s)")
    ax.plot(rates, good, marker="s", label="goodput (requests/s, every SLO met)")
    ax.plot(rates, rates, linestyle=":", color="grey", label="offered = served")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("requests/s")
    ax.set_title(ctx.title("Throughput and goodput against offered rate"), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    figures["throughput_goodput_vs_rate.png"] = fig

    fig = Figure(figsize=(7.5, 5.2))
    ax = fig.subplots()
    ax.plot(rates, toks, marker="o")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(ctx.title("Output token throughput against offered rate"), fontsize=9)
    ax.grid(True, alpha=0.3)
    figures["tokens_vs_rate.png"] = fig

    fig = Figure(figsize=(7.5, 5.2))
    ax = fig.subplots()
    slos = {"ttft_ms": ctx.slo.ttft_ms, "tpot_ms": ctx.slo.tpot_ms, "e2e_ms": ctx.slo.e2e_ms}
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "e2e")):
        p99 = [p["summary"][key]["p99"] for p in points]
        (line,) = ax.plot(rates, [float("nan") if v is None else v for v in p99], marker="o", label=f"{label} p99")
        slo = slos[key]
        if slo is not None:
            ax.axhline(slo, color=line.get_color(), linestyle="--", linewidth=1, label=f"{label} SLO")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.set_title(ctx.title("p99 latency against offered rate"), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    figures["latency_vs_rate.png"] = fig
    return laid_out(figures)


def laid_out(figures: dict[str, Figure]) -> dict[str, Figure]:
    for fig in figures.values():
        fig.tight_layout()
    return figures


def save(figures: dict[str, Figure], out_dir: Path) -> list[Path]:
    paths = []
    for name, fig in figures.items():
        paths.append(out_dir / name)
        fig.savefig(paths[-1], dpi=80)
    return paths


def run_plots(records: Sequence[RequestRecord], out_dir: Path, ctx: PlotContext) -> list[Path]:
    return save(run_figures(records, ctx), out_dir)


def sweep_plots(points: Sequence[dict[str, Any]], out_dir: Path, ctx: PlotContext) -> list[Path]:
    return save(sweep_figures(points, ctx), out_dir)
