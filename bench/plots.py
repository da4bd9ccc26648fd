"""PNG plots for a run (latency CDFs, TTFT and ITL over time) and a sweep
(throughput and goodput against offered rate). Headless (Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.metrics import request_metrics  # noqa: E402
from bench.records import RequestRecord  # noqa: E402


def _cdf(ax: Any, values_ms: list[float], title: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("ms")
    ax.set_ylabel("fraction of requests" if "ITL" not in title else "fraction of gaps")
    ax.grid(True, alpha=0.3)
    if not values_ms:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    vals = sorted(values_ms)
    n = len(vals)
    ax.step(vals, [(i + 1) / n for i in range(n)], where="post")


def run_plots(records: Sequence[RequestRecord], out_dir: Path) -> list[Path]:
    pairs = [(r, m) for r in records if (m := request_metrics(r)) is not None]
    paths = []

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    _cdf(axes[0][0], [m.ttft_s * 1000 for _, m in pairs if m.ttft_s is not None], "TTFT CDF")
    _cdf(axes[0][1], [m.tpot_s * 1000 for _, m in pairs if m.tpot_s is not None], "TPOT CDF")
    _cdf(axes[1][0], [g * 1000 for _, m in pairs for g in m.itls_s], "ITL CDF")
    _cdf(axes[1][1], [m.e2e_s * 1000 for _, m in pairs], "e2e latency CDF")
    fig.tight_layout()
    paths.append(out_dir / "latency_cdf.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 4))
    for tenant in sorted({r.tenant for r, _ in pairs}):
        pts = [(r.sent_s, m.ttft_s * 1000) for r, m in pairs if r.tenant == tenant and m.ttft_s is not None]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=6, label=tenant)
    failed = [r.sent_s for r in records if r.outcome == "failed"]
    if failed:
        ax.scatter(failed, [0.0] * len(failed), marker="x", color="red", label="failed (at send time)")
    ax.set_title("TTFT over time")
    ax.set_xlabel("send time (s from start)")
    ax.set_ylabel("TTFT (ms)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / "ttft_over_time.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 4))
    xs, ys = [], []
    for r, m in pairs:
        for t, gap in zip(r.chunk_times[1:], m.itls_s):
            xs.append(r.sent_s + t)
            ys.append(gap * 1000)
    ax.scatter(xs, ys, s=2)
    ax.set_title("ITL over time")
    ax.set_xlabel("chunk arrival (s from start)")
    ax.set_ylabel("gap to previous content chunk (ms)")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    paths.append(out_dir / "itl_over_time.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)
    return paths


def sweep_plots(points: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    """points: {"rate", "summary"} per offered rate, in order."""
    rates = [p["rate"] for p in points]
    rps = [p["summary"]["throughput"]["requests_per_s"] for p in points]
    good = [p["summary"]["goodput"]["requests_per_s"] for p in points]
    toks = [p["summary"]["throughput"]["output_tokens_per_s"] for p in points]
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(rates, rps, marker="o", label="throughput (requests/s)")
    ax.plot(rates, good, marker="s", label="goodput (requests/s)")
    ax.plot(rates, rates, linestyle=":", color="grey", label="offered = served")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("requests/s")
    ax.set_title("Throughput and goodput against offered rate")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "throughput_goodput_vs_rate.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(rates, toks, marker="o")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("output tokens/s")
    ax.set_title("Output token throughput against offered rate")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    paths.append(out_dir / "tokens_vs_rate.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "e2e")):
        p99 = [p["summary"][key]["p99"] for p in points]
        ax.plot(rates, [float("nan") if v is None else v for v in p99], marker="o", label=f"{label} p99")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.set_title("p99 latency against offered rate")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "latency_vs_rate.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)
    return paths
