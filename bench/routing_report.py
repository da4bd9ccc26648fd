"""The report of `make bench-routing` (bench/routing_bench.py): result.json, a
markdown summary with one row per pool, policy and rate, and a PNG of TTFT p99
and goodput per policy, a row of plots per pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from matplotlib.figure import Figure

from bench.routing_pool import within_spread
from bench.routing_text import BACKLOG_WHY, MODELLED_READING, NATIVE_CAVEAT, simulator_pool

COLUMNS = (
    ("policy", "policy"),
    ("rate (sessions/s)", "rate"),
    ("requests", "requests"),
    ("ok", "ok"),
    ("prefix-cache hit rate", "hit_rate"),
    ("blocks evicted", "evicted"),
    ("TTFT p50 ms", "ttft_p50_ms"),
    ("TTFT p99 ms", "ttft_p99_ms"),
    ("p99 per run, min-max ms", "ttft_p99_spread_ms"),
    ("TPOT p50 ms", "tpot_p50_ms"),
    ("runs", "repeats"),
    ("goodput req/s", "goodput_rps"),
    ("load max/min", "load_ratio"),
)


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, list):  # a spread: min-max
        return "-".join(_fmt(x) for x in v)
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


def best(row: list[dict[str, Any]], key: str, low: bool) -> dict[str, Any] | None:
    known = [r for r in row if r.get(key) is not None]
    return (min if low else max)(known, key=lambda r: r[key]) if known else None


def best_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Per rate: which policy had the best goodput, TTFT p99 and hit rate."""
    lines = []
    for rate in sorted({r["rate"] for r in runs}):
        row = [r for r in runs if r["rate"] == rate]

        def name(key: str, low: bool, row: list[dict[str, Any]] = row) -> str:
            top = best(row, key, low)
            return "n/a" if top is None else f"{top['policy']} ({_fmt(top[key])})"

        lines.append(
            f"- {rate:g} sessions/s: best goodput {name('goodput_rps', False)}, best TTFT p99 "
            f"{name('ttft_p99_ms', True)} ms, best hit rate {name('hit_rate', False)}."
        )
    return lines


def precise_verdict(runs: list[dict[str, Any]]) -> list[str]:
    """The issue's goal, per rate: blended precise has the best goodput and TTFT p99 of all."""
    lines = []
    for rate in sorted({r["rate"] for r in runs}):
        row = [r for r in runs if r["rate"] == rate]
        precise = next((r for r in row if r["policy"] == "blended_precise"), None)
        if precise is None:
            continue
        good, tail = best(row, "goodput_rps", False), best(row, "ttft_p99_ms", True)
        # A tie on goodput (every request met the SLO under several policies) counts as best.
        good_ok = good is not None and precise["goodput_rps"] >= good["goodput_rps"]
        tail_ok = tail is not None and tail is precise
        # The nearest rival on the tail: the best other policy when precise won, the winner when it did not.
        other = best([r for r in row if r is not precise], "ttft_p99_ms", True) if tail_ok else tail
        noise = other is not None and within_spread(precise, other)
        rival = next((r for r in row if r["policy"] == "blended"), None)
        goods = [r["goodput_rps"] for r in row]
        lines.append(
            f"- {rate:g} sessions/s: best goodput **{'yes' if good_ok else 'no'}** "
            f"({_fmt(precise['goodput_rps'])} req/s; best {_fmt(good and good['goodput_rps'])} of "
            f"{good and good['policy']}; every policy between {_fmt(min(goods))} and {_fmt(max(goods))}"
            + (
                f"; **within the spread**: the per-run goodput of blended_precise "
                f"{_fmt(precise.get('goodput_spread_rps'))}, of {good['policy']} {_fmt(good.get('goodput_spread_rps'))}"
                if not good_ok and good is not None and within_spread(precise, good, "goodput_rps")
                else ""
            )
            + "), "
            f"best TTFT p99 **{'yes' if tail_ok else 'no'}** ({_fmt(precise['ttft_p99_ms'])} ms; best "
            f"{_fmt(tail and tail['ttft_p99_ms'])} of {tail and tail['policy']}"
            + (
                f"; **within the spread**: the per-run p99 of blended_precise {_fmt(precise.get('ttft_p99_spread_ms'))}"
                f", of {other['policy']} {_fmt(other.get('ttft_p99_spread_ms'))} ms"
                if noise and other is not None
                else ""
            )
            + "). Hit rate "
            f"{_fmt(precise['hit_rate'])}, load max/min {load_ratio(precise)}"
            + (
                f"; blended (approximate): hit rate {_fmt(rival['hit_rate'])}, TTFT p99 "
                f"{_fmt(rival['ttft_p99_ms'])} ms, load max/min {load_ratio(rival)}."
                if rival
                else "."
            )
        )
    return lines


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    lines = precise_verdict(rows)
    if not lines:
        return []
    return ["Did blended precise have the best goodput and TTFT p99 (the issue's goal)?", "", *lines, ""]


def markdown(result: dict[str, Any], plot: str) -> str:
    cfg, hot, kill = result["config"], result["hot"], result["kill"]
    native = result.get("native_pooled") or []
    slo = cfg["slo"]
    lines = [
        "# Routing policies side by side (`make bench-routing`)",
        "",
        "Two pools of three backends of one model, one gateway process serving one model per policy and pool, "
        "every policy of a pool over the same three backends. "
        f"{cfg['system_prompts']} shared system prompts drawn Zipf (s={cfg['zipf_s']}); {cfg['turns']}-turn "
        f"conversations, {cfg['max_tokens']} output tokens per turn; sessions arrive open loop (Poisson). The "
        "native pool's prompts are text (system prompts of about "
        f"{cfg['system_words']} words, chat completions, each turn carrying the real answer of the one before); "
        "the simulators' are as their section says. Every policy of a rate is sent the same workload (the same "
        "prompt for the same session, the same arrivals and turns), labelled in its first block so that no run "
        "finds a cache another run warmed.",
        "",
        f"SLO for goodput: TTFT <= {slo['ttft_ms']} ms and TPOT <= {slo['tpot_ms']} ms; goodput = requests "
        "meeting it / seconds of arrivals. Hit rate = prompt tokens found in the engines' prefix caches / prompt "
        "tokens looked up, from the engines' own counters. Load max/min = requests served by the busiest backend "
        "/ by the least busy one.",
        "",
        "## Three vLLM simulators",
        "",
        simulator_pool(cfg),
        "",
        *table(result["pooled"]),
        "",
        *best_lines(result["pooled"]),
        "",
        *verdict(result["pooled"]),
        *([MODELLED_READING, "", BACKLOG_WHY, ""] if cfg["source"] == "modelled" else []),
    ]
    if native:
        lines += [
            "## Three native engines in the gateway",
            "",
            "Three `native` backends on builtin:tiny, a `served_model` each (so three engines, three caches), "
            "one thread each, inside the gateway process; "
            f"{cfg['native_duration_s']:g} s of arrivals per run (shorter than the simulators' runs, to keep the "
            "bench within minutes: the engines and the gateway share one process). Hit rate from the gateway's "
            "`switchyard_engine_prefix_cache_{queries,hits}_tokens_total{engine=...}`. `blended` is the blended "
            "weights with the approximate prefix scorer (`prefix_approx`, what the gateway routed where); "
            "`blended_precise` is `routing: precise` (policies/profiles.py): its prefix match is read from the "
            "KV index each engine's KV-cache events (block stored, removed, all cleared) keep per backend, plus "
            "the blocks of the requests routed there and not yet announced.",
            "",
            *table(native),
            "",
            *best_lines(native),
            "",
            *verdict(native),
            NATIVE_CAVEAT,
            "",
        ]
    lines += [
        f"Each policy ran {cfg.get('sim_repeats', 1)} time(s) per rate over the simulators and "
        f"{cfg.get('repeats', 1)} over the native engines, repetition k starting at the k-th policy so that "
        "each takes every place in the order, every repetition the same workload under a label of its own. "
        "A row pools its repetitions: TTFT percentiles over all their requests, hit rate from the summed "
        "counters, requests per backend summed (load max/min), goodput the mean; `p99 per run` is the min-max "
        "of the repetitions' own p99, the noise a difference must exceed (the pooled p99 ranks all requests together, "
        "so it can lie just outside that range). On a shared 2-core machine (other "
        "work loads it) that noise is tens to hundreds of ms; the hit rates and load ratios are steadier.",
        "",
        f"![TTFT p99 and goodput per policy]({plot})",
        "",
        "## One hot prefix",
        "",
        f"Over the simulators: every session the same system prompt, at {hot['rate']:g} sessions/s, under the "
        f"blended profile with `load_factor: {cfg['load_factor']}`. Requests per backend: {hot['served']}. The "
        "bound, sampled every 0.2 s from the gateway's `switchyard_backend_inflight`: share of samples where no "
        f"backend held more than ceil({cfg['load_factor']} x in-flight / 3): "
        f"**{_fmt(hot.get('inflight_within_bound'))}** "
        f"({hot.get('inflight_samples', 0)} samples with work in flight, {_fmt(hot.get('inflight_mean_total'))} "
        f"in flight on average). Hit rate {_fmt(hot['hit_rate'])}, TTFT p99 {_fmt(hot['ttft_p99_ms'])} ms.",
        "",
        "How to read it: the bound is applied when a request is routed (policies/pickers.py `over_bound`, "
        "pinned by its unit tests); a sample taken later can exceed it without any decision having done so, "
        "when requests on the other backends finished in between and the pool's total fell. It limits "
        "concurrent load, not totals: while little is in flight the backends that already hold the hot "
        "prefix take nearly everything, which keeps its cache warm in as few places as the load allows.",
        "",
        "## One backend killed mid-run",
        "",
        f"Over the simulators, round robin, {kill['rate']:g} sessions/s; the third backend is killed (SIGKILL) "
        f"halfway. Requests: {kill['requests']}, ok {kill['ok']}; failed before any content reached the client "
        f"(must be 0): **{kill.get('lost_before_streaming')}**; cut mid-stream (already streaming when the "
        f"backend died; never failed over, by design): {kill.get('cut_mid_stream')}. Attempts on the dead "
        f"backend that failed before their first byte and were failed over: {_fmt(kill.get('failed_over'))}; "
        f"its ejections: {_fmt(kill.get('ejections'))}.",
        "",
        f"Wall time of the whole bench: {result.get('wall_s', 'n/a')} s. Every number is in `result.json`.",
        "",
    ]
    return "\n".join(lines)


def figure(pools: dict[str, list[dict[str, Any]]]) -> Figure:
    pools = {name: runs for name, runs in pools.items() if runs}
    fig = Figure(figsize=(11, 4 * len(pools)))
    axes = fig.subplots(len(pools), 2, squeeze=False)
    for (pool, runs), (ttft_ax, good_ax) in zip(pools.items(), axes):
        rates = sorted({r["rate"] for r in runs})
        policies = list(dict.fromkeys(r["policy"] for r in runs))
        width = 0.8 / max(1, len(rates))
        for j, rate in enumerate(rates):
            row = {r["policy"]: r for r in runs if r["rate"] == rate}
            xs = [i + j * width for i in range(len(policies))]
            ttft_ax.bar(xs, [row[p]["ttft_p99_ms"] or 0 for p in policies], width, label=f"{rate:g} sessions/s")
            good_ax.bar(xs, [row[p]["goodput_rps"] or 0 for p in policies], width, label=f"{rate:g} sessions/s")
        for ax, title in ((ttft_ax, "TTFT p99 (ms)"), (good_ax, "goodput (req/s under SLO)")):
            ax.set_title(f"{pool}: {title}")
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
    pools = {"vLLM simulators": result["pooled"], "native engines": result.get("native_pooled") or []}
    figure(pools).savefig(png, dpi=100)
    md = out_dir / "README.md"
    md.write_text(markdown(result, png.name))
    return [json_path, md, png]
