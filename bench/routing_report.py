"""The report of `make bench-routing` (bench/routing_bench.py): result.json, a
markdown summary with one row per policy and rate, and a PNG of TTFT p99 and
goodput per policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from matplotlib.figure import Figure

COLUMNS = (
    ("policy", "model"),
    ("rate (sessions/s)", "rate"),
    ("requests", "requests"),
    ("ok", "ok"),
    ("prefix-cache hit rate", "hit_rate"),
    ("TTFT p50 ms", "ttft_p50_ms"),
    ("TTFT p99 ms", "ttft_p99_ms"),
    ("TPOT p50 ms", "tpot_p50_ms"),
    ("goodput req/s", "goodput_rps"),
    ("load max/min", "load_ratio"),
)


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    return str(v)


def load_ratio(run: dict[str, Any]) -> str:
    """Requests of the busiest backend / of the least busy one (from `served`, so that
    a backend that served nothing reads as such, not as a missing number)."""
    loads = list((run.get("served") or {}).values())
    if not loads:
        return "n/a"
    if min(loads) == 0:
        return f"inf ({max(loads)}:0, one backend served none)"
    return _fmt(max(loads) / min(loads))


def table(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(c for c, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in runs:
        lines.append(
            "| " + " | ".join(load_ratio(r) if k == "load_ratio" else _fmt(r.get(k)) for _, k in COLUMNS) + " |"
        )
    return lines


def best_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Per rate: which policy had the best goodput, TTFT p99 and hit rate."""
    lines = []
    for rate in sorted({r["rate"] for r in runs}):
        row = [r for r in runs if r["rate"] == rate]

        def best(key: str, low: bool, row: list[dict[str, Any]] = row) -> str:
            known = [r for r in row if r.get(key) is not None]
            if not known:
                return "n/a"
            top = (min if low else max)(known, key=lambda r: r[key])
            return f"{top['model']} ({_fmt(top[key])})"

        lines.append(
            f"- {rate:g} sessions/s: best goodput {best('goodput_rps', False)}, best TTFT p99 "
            f"{best('ttft_p99_ms', True)} ms, best hit rate {best('hit_rate', False)}."
        )
    return lines


def markdown(result: dict[str, Any], plot: str) -> str:
    cfg, hot, kill = result["config"], result["hot"], result["kill"]
    slo = cfg["slo"]
    lines = [
        "# Routing policies side by side (`make bench-routing`)",
        "",
        f"Three vLLM simulators of one model (token source: `{cfg['source']}`"
        + (", the native engine on builtin:tiny" if cfg["source"] == "engine" else ", fixed synthetic timing")
        + "), one gateway, one model per policy over the same three backends. "
        f"{cfg['system_prompts']} shared system prompts of about {cfg['system_words']} words, drawn Zipf "
        f"(s={cfg['zipf_s']}); {cfg['turns']}-turn conversations, {cfg['max_tokens']} output tokens per turn; "
        f"sessions arrive open loop (Poisson) for {cfg['duration_s']:g} s per run. Each run has system prompts "
        "of its own (no cache warmed by an earlier run).",
        "",
        f"SLO for goodput: TTFT <= {slo['ttft_ms']} ms and TPOT <= {slo['tpot_ms']} ms; goodput = requests "
        "meeting it / seconds of arrivals. Hit rate = prompt tokens found in the simulators' prefix caches / prompt "
        "tokens looked up (their `/_sim/stats` counters, the same as `vllm:prefix_cache_*`). Load max/min = "
        "requests served by the busiest backend / by the least busy one.",
        "",
        *table(result["runs"]),
        "",
        *best_lines(result["runs"]),
        "",
        "One run on a shared 2-core machine (other work loaded it): differences of a few tens of ms in TTFT p99 "
        "are within run-to-run noise here; the hit rates and load ratios are the steadier signal.",
        "",
        "**blended precise: not measured.** It needs KV-cache events from each backend: the simulators publish "
        "none, and the native engine publishes them only in process. Native backends of one model path in one "
        "gateway share one engine (one cache) unless their `served_model` differs, and then the second engine "
        "fails to load (its Prometheus metrics collide in the gateway's registry: `Duplicated timeseries ... "
        "switchyard_engine_running_sequences`), so three precise-indexed engines cannot run side by side yet.",
        "",
        f"![TTFT p99 and goodput per policy]({plot})",
        "",
        "## One hot prefix",
        "",
        f"Every session the same system prompt, at {hot['rate']:g} sessions/s, under the blended profile with "
        f"`load_factor: {cfg['load_factor']}`. Requests per backend: {hot['served']}. The bound, sampled every "
        "0.2 s from the gateway's `switchyard_backend_inflight`: share of samples where no backend held more than "
        f"ceil({cfg['load_factor']} x in-flight / 3): **{_fmt(hot.get('inflight_within_bound'))}** "
        f"({hot.get('inflight_samples', 0)} samples with work in flight, {_fmt(hot.get('inflight_mean_total'))} "
        f"in flight on average). Hit rate {_fmt(hot['hit_rate'])}, TTFT p99 {_fmt(hot['ttft_p99_ms'])} ms.",
        "",
        "How to read it: the bound is applied when a request is routed (policies/scoring.py `over_bound`, "
        "pinned by its unit tests); a sample taken later can exceed it without any decision having done so, "
        "when requests on the other backends finished in between and the pool's total fell. It limits "
        "concurrent load, not totals: while little is in flight the backends that already hold the hot "
        "prefix take nearly everything, which keeps its cache warm in as few places as the load allows.",
        "",
        "## One backend killed mid-run",
        "",
        f"Round robin, {kill['rate']:g} sessions/s; the third backend is killed (SIGKILL) halfway. Requests: "
        f"{kill['requests']}, ok {kill['ok']}; failed before any content reached the client (must be 0): "
        f"**{kill.get('lost_before_streaming')}**; cut mid-stream (already streaming when the backend died; "
        f"never failed over, by design): {kill.get('cut_mid_stream')}. Attempts on the dead backend that failed "
        f"before their first byte and were failed over: {_fmt(kill.get('failed_over'))}; its ejections: "
        f"{_fmt(kill.get('ejections'))}.",
        "",
        f"Wall time of the whole bench: {result.get('wall_s', 'n/a')} s. Every number is in `result.json`.",
        "",
    ]
    return "\n".join(lines)


def figure(runs: list[dict[str, Any]]) -> Figure:
    fig = Figure(figsize=(10, 4))
    ttft_ax, good_ax = fig.subplots(1, 2)
    rates = sorted({r["rate"] for r in runs})
    policies = list(dict.fromkeys(r["model"] for r in runs))
    width = 0.8 / max(1, len(rates))
    for j, rate in enumerate(rates):
        row = {r["model"]: r for r in runs if r["rate"] == rate}
        xs = [i + j * width for i in range(len(policies))]
        ttft_ax.bar(xs, [row[p]["ttft_p99_ms"] or 0 for p in policies], width, label=f"{rate:g} sessions/s")
        good_ax.bar(xs, [row[p]["goodput_rps"] or 0 for p in policies], width, label=f"{rate:g} sessions/s")
    for ax, title in ((ttft_ax, "TTFT p99 (ms)"), (good_ax, "goodput (req/s under SLO)")):
        ax.set_title(title)
        ax.set_xticks([i + width * (len(rates) - 1) / 2 for i in range(len(policies))])
        ax.set_xticklabels(policies, fontsize=8)
        ax.legend(fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Routing policies over three backends (bench/routing_bench.py)")
    fig.tight_layout()
    return fig


def write_report(result: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "result.json"
    json_path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    png = out_dir / "policies.png"
    figure(result["runs"]).savefig(png, dpi=100)
    md = out_dir / "README.md"
    md.write_text(markdown(result, png.name))
    return [json_path, md, png]
