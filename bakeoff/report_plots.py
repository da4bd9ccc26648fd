"""The report's figures, on bench/plots.py's helpers: goodput against offered rate per
candidate with the attainment target and each knee marked, and latency CDFs (TTFT, TPOT,
E2E) of every candidate at its knee with the SLO lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from bakeoff.decision import check, knee_of
from bakeoff.decision import points as decided_points
from bench.plots import cdf_lines, laid_out, save


def figures(doc: dict[str, Any]) -> dict[str, Figure]:
    slo = doc["plan"]["slo"]
    subtitle = f"{doc['workload']['description']}; seed {doc['plan']['seed']}"
    figs: dict[str, Figure] = {}

    fig = Figure(figsize=(13, 5.2))
    ax, gx = fig.subplots(1, 2)
    for c in doc["candidates"]:
        points = decided_points(c)
        if not points:
            continue
        rates = [p["rate"] for p in points]
        frac = [p["good"] / p["judged"] if p["judged"] else 0.0 for p in points]
        (line,) = ax.plot(rates, frac, marker="o", label=c["name"])
        lo = [p["interval"][0] for p in points]
        hi = [p["interval"][1] for p in points]
        ax.fill_between(rates, lo, hi, color=line.get_color(), alpha=0.12)
        gx.plot(rates, [p["summary"]["goodput"]["requests_per_s"] for p in points], marker="o", label=c["name"])
        knee = knee_of(c)
        if knee is not None:
            ax.axvline(knee, color=line.get_color(), linestyle=":", linewidth=1)
            gx.axvline(knee, color=line.get_color(), linestyle=":", linewidth=1)
            ax.annotate(f"knee {knee:.3g}", (knee, slo["attainment"]), fontsize=7, rotation=90, va="top")
    ax.axhline(slo["attainment"], color="red", linestyle="--", linewidth=1, label=f"SLO target {slo['attainment']:.0%}")
    top = max((p for x in (ax, gx) for p in x.get_xlim()), default=1.0)
    gx.plot([0, top], [0, top], linestyle=":", color="grey", label="every request good")
    for a in (ax, gx):
        a.set_xscale("log", base=2)
        a.xaxis.set_major_formatter(ScalarFormatter())
        a.set_xlabel("offered rate (sessions/s, open loop)")
        a.grid(True, alpha=0.3)
        a.legend(fontsize=7)
    ax.set_ylabel("goodput fraction (good / judged); band: Wilson interval")
    ax.set_title(f"SLO attainment against offered rate (dotted: each knee)\n{subtitle}", fontsize=9)
    gx.set_yscale("log", base=2)
    gx.yaxis.set_major_formatter(ScalarFormatter())
    gx.set_ylabel("goodput (good requests/s)")
    gx.set_title(f"Goodput against offered rate\n{subtitle}", fontsize=9)
    figs["goodput_vs_rate.png"] = fig

    fig = Figure(figsize=(12, 4.2))
    axes = fig.subplots(1, 3)
    for ax, key, name, bound in (
        (axes[0], "ttft_ms", "TTFT", slo["ttft_ms"]),
        (axes[1], "tpot_ms", "TPOT", slo["tpot_ms"]),
        (axes[2], "e2e_ms", "E2E", slo["e2e_ms"]),
    ):
        series = {}
        for c in doc["candidates"]:
            k = check(c, "measure", "knee")
            cdf = k["evidence"].get("cdf") if k else None
            if cdf:
                series[f"{c['name']} @ {cdf['rate']:.3g}/s"] = cdf[key]
        cdf_lines(ax, series, f"{name} CDF at each knee", bound, name)
    fig.suptitle(f"Latency at each candidate's knee (else its lowest probe)\n{subtitle}", fontsize=9)
    figs["latency_cdf.png"] = fig
    return laid_out(figs)


def write(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    return save(figures(doc), out_dir)
