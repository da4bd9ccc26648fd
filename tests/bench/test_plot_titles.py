"""Plots carry the run's parameters in their titles and the SLO as lines, read
from the figure objects (not from pixels)."""

from __future__ import annotations

from matplotlib.figure import Figure

from bench.metrics import Slo
from bench.plot_context import PlotContext
from bench.plots import run_figures, sweep_figures
from bench.records import RequestRecord
from bench.report import run_parameters

CONFIG = {
    "model": "llama-3-8b",
    "base_url": "http://gw:8080",
    "mode": "open loop, poisson at 8 req/s",
    "num_requests": 500,
    "input_tokens": 512,
    "output_tokens": 128,
    "input_sizing": {"method": "endpoint", "estimate": False},
}


def records() -> list[RequestRecord]:
    out = []
    for i in range(20):
        out.append(
            RequestRecord(
                index=i,
                tenant="acme" if i % 2 else "beta",
                session=i,
                turn=0,
                stream=True,
                sent_s=i * 0.1,
                chunk_times=[0.05 + 0.01 * i, 0.07 + 0.01 * i, 0.09 + 0.01 * i],
                end_s=0.1 + 0.01 * i,
                usage_completion_tokens=3,
            )
        )
    return out


def titles(fig: Figure) -> str:
    parts = [fig.get_suptitle()] + [ax.get_title() for ax in fig.axes]
    return "\n".join(parts)


def slo_labels(fig: Figure) -> set[str]:
    return {line.get_label() for ax in fig.axes for line in ax.get_lines() if "SLO" in str(line.get_label())}


def test_run_parameters_name_the_run() -> None:
    line = run_parameters(CONFIG)
    for needle in ("llama-3-8b @ http://gw:8080", "poisson at 8 req/s", "500 requests", "input 512 tok", "<= 128 tok"):
        assert needle in line
    assert "sized with the target's /tokenize" in line
    estimated = run_parameters({**CONFIG, "input_sizing": {"method": "estimate", "estimate": True}})
    assert "ESTIMATE" in estimated


def test_run_figures_have_parameters_and_slo_lines() -> None:
    ctx = PlotContext(run_parameters(CONFIG), Slo(ttft_ms=500, tpot_ms=50, e2e_ms=4000))
    figures = run_figures(records(), ctx)
    assert set(figures) == {"latency_cdf.png", "ttft_over_time.png", "itl_over_time.png"}
    for name, fig in figures.items():
        text = titles(fig)
        assert ctx.parameters in text, name
        assert "SLO: TTFT <= 500 ms, TPOT <= 50 ms, e2e <= 4000 ms" in text, name
    assert slo_labels(figures["latency_cdf.png"]) == {"TTFT SLO 500 ms", "TPOT SLO 50 ms", "e2e SLO 4000 ms"}
    assert slo_labels(figures["ttft_over_time.png"]) == {"TTFT SLO 500 ms"}
    assert slo_labels(figures["itl_over_time.png"]) == {"TPOT SLO 50 ms"}
    # The line sits at the SLO value on the right axis of the right panel.
    ttft_cdf = figures["latency_cdf.png"].axes[0]
    (slo_line,) = [ln for ln in ttft_cdf.get_lines() if ln.get_label() == "TTFT SLO 500 ms"]
    assert list(slo_line.get_xdata()) == [500, 500]


def test_without_an_slo_titles_say_so_and_no_line_is_drawn() -> None:
    figures = run_figures(records(), PlotContext(run_parameters(CONFIG), Slo()))
    for fig in figures.values():
        assert "SLO: none given" in titles(fig) and slo_labels(fig) == set()


def test_sweep_figures_have_parameters_and_slo_lines() -> None:
    def summary(rate: float) -> dict:
        p99 = {"p99": 100.0 * rate}
        return {
            "throughput": {"requests_per_s": rate, "output_tokens_per_s": 10 * rate},
            "goodput": {"requests_per_s": rate * 0.9},
            "ttft_ms": p99,
            "tpot_ms": p99,
            "e2e_ms": p99,
        }

    points = [{"rate": r, "summary": summary(r)} for r in (1.0, 2.0, 4.0)]
    ctx = PlotContext(run_parameters({**CONFIG, "mode": "rate sweep 1,2,4 req/s"}), Slo(ttft_ms=300, tpot_ms=40))
    figures = sweep_figures(points, ctx)
    for name, fig in figures.items():
        assert "rate sweep 1,2,4 req/s" in titles(fig) and "SLO: TTFT <= 300 ms, TPOT <= 40 ms" in titles(fig), name
    assert slo_labels(figures["latency_vs_rate.png"]) == {"TTFT SLO", "TPOT SLO"}
