"""`make bench-routing`: routing policies side by side on two pools of three backends.

Pool one: three vLLM simulators of one model (bench/routing_sims.py). By default
modelled GPUs: prefills serialized per simulator and charged per uncached prompt
token, all sleep-based (three independent devices even on 2 cores), a bounded
prefix cache, and vLLM's KV-cache events over ZMQ, to which each gateway backend
subscribes; the workload is token ids (bench/routing_tokens.py), so every policy,
`blended_precise` included, runs here. `--source engine` (the native engine on
builtin:tiny generates, text prompts, no events) and `synthetic` remain. Pool two:
three native-engine backends (`builtin:tiny`, a `served_model` each, so three
engines and three caches) inside the gateway process, whose KV-cache events feed
the gateway's per-backend KV index. `blended_precise` is the `precise` scoring
profile (policies/profiles.py: the prefix match the KV index gives dominates until
a backend is really loaded); `blended` the blended weights on the approximate
prefix scorer. One gateway process serves one model per policy and pool, each over
the same three backends. A multi-tenant workload: users share a few long system
prompts, drawn Zipf-distributed, and hold multi-turn conversations; sessions
arrive open loop (Poisson) at two rates per pool. Each run labels its prompts'
first block, so no run finds a cache warmed by another.

Per pool, policy and rate: prefix-cache hit rate (the engines' own counters:
the simulators' `/_sim/stats`, the gateway's `switchyard_engine_prefix_cache_*`
for the native engines), TTFT p50/p99, TPOT p50, goodput under an SLO, and the max/min ratio
of requests served per backend. Then a hot-prefix run (every session the same
system prompt) under `blended`, whose bounded load should keep a backend within
`load_factor` of its share; and a run where one backend is killed halfway,
which must lose no request that had not started streaming (round robin at the
heavy rate, so that the dead backend is tried before the health probe notices).

Judged over HTTP only (bench/ layering).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

from bench.arrivals import poisson_arrivals
from bench.metrics import Slo, distribution_ms, meets_slo, request_metrics
from bench.procs import Server, python_module
from bench.records import RequestRecord
from bench.routing_config import NATIVE_POLICIES, POLICIES, UNEVENTED_POLICIES, RoutingBenchConfig
from bench.routing_pool import pool, schedule
from bench.routing_report import table, write_report
from bench.routing_sims import BACKENDS, SimPorts, one_thread, sim_backends, sim_counters, start_sims
from bench.routing_tokens import run_token_load, token_sessions
from bench.routing_workload import run_load, sessions
from processes import free_port

NATIVE = ("nat0", "nat1", "nat2")
# The blended profile's weights (policies/profiles.py) but the prefix scorer's.
LOAD_WEIGHTS = {"queue": 2.0, "kv": 2.0, "inflight": 2.0, "session": 10.0}
Counters = Callable[[], dict[str, dict[str, float]]]


# ---- what the backends and the gateway say ----------------------------------------------------


# The gateway's series of the native backends: requests it sent each, and each engine's prefix cache.
NATIVE_SERIES = (
    ("switchyard_requests_total{", "backend", "requests"),
    ("switchyard_engine_prefix_cache_queries_tokens_total{", "engine", "queries"),
    ("switchyard_engine_prefix_cache_hits_tokens_total{", "engine", "hits"),
)


def native_counters(gateway_url: str) -> dict[str, dict[str, float]]:
    out = {n: {"requests": 0.0, "queries": 0.0, "hits": 0.0} for n in NATIVE}
    for line in httpx.get(gateway_url + "/metrics", timeout=10).text.splitlines():
        for prefix, label, key in NATIVE_SERIES:
            if line.startswith(prefix) and f'{label}="' in line:
                name = line.split(f'{label}="', 1)[1].split('"', 1)[0]
                if name in out:
                    out[name][key] += float(line.rsplit(" ", 1)[1])
    return out


async def settled(counters: Counters, before: dict, expected: int) -> dict[str, dict[str, float]]:
    """The counters once every request of the run is counted: the gateway counts a
    request when its stream has ended, which can be just after the client saw the end."""
    after = counters()
    for _ in range(50):
        if sum(after[n]["requests"] - before[n]["requests"] for n in after if n in before) >= expected:
            break
        await asyncio.sleep(0.1)
        after = counters()
    return after


async def sample_inflight(
    gateway_url: str, backends: tuple[str, ...], samples: list[dict[str, float]], stop: asyncio.Event
) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        while not stop.is_set():
            text = (await http.get(gateway_url + "/metrics")).text
            row = {}
            for line in text.splitlines():
                if line.startswith("switchyard_backend_inflight{"):
                    name = line.split('backend="', 1)[1].split('"', 1)[0]
                    if name in backends:
                        row[name] = float(line.rsplit(" ", 1)[1])
            if sum(row.values()) > 0:
                samples.append(row)
            await asyncio.sleep(0.2)


def gateway_counter(gateway_url: str, name: str, backend: str, *also: str) -> float:
    text = httpx.get(gateway_url + "/metrics", timeout=10).text
    wanted = (f'backend="{backend}"', *also)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and all(w in line for w in wanted)
    )


def summarize(records: list[RequestRecord], before: dict, after: dict, slo: Slo, duration_s: float) -> dict[str, Any]:
    pairs = [m for r in records if (m := request_metrics(r)) is not None]
    served = {n: round(after[n]["requests"] - before[n]["requests"]) for n in after if n in before}
    queries = sum(after[n]["queries"] - before[n]["queries"] for n in served)
    hits = sum(after[n]["hits"] - before[n]["hits"] for n in served)
    # Blocks evicted: only the modelled simulators count them (None elsewhere, not 0).
    known = served and all("evicted" in after[n] and "evicted" in before[n] for n in served)
    evicted = sum(after[n]["evicted"] - before[n]["evicted"] for n in served) if known else None
    loads = list(served.values())
    ttft = distribution_ms(m.ttft_s for m in pairs if m.ttft_s is not None)
    tpot = distribution_ms(m.tpot_s for m in pairs if m.tpot_s is not None)
    return {
        "requests": len(records),
        "ok": len(pairs),
        "failed": sum(r.outcome == "failed" for r in records),
        "hit_rate": hits / queries if queries else None,
        "ttft_p50_ms": ttft["p50"],
        "ttft_p99_ms": ttft["p99"],
        "tpot_p50_ms": tpot["p50"],
        "goodput_rps": sum(meets_slo(m, slo) for m in pairs) / duration_s,
        "served": served,
        "load_ratio": max(loads) / min(loads) if loads and min(loads) > 0 else None,  # None: one served none
        # What bench/routing_pool.py pools over repetitions: the counters, each request's TTFT and TPOT.
        "queries": queries,
        "hits": hits,
        "evicted": evicted,
        "ttft_s": [round(m.ttft_s, 6) for m in pairs if m.ttft_s is not None],
        "tpot_s": [round(m.tpot_s, 6) for m in pairs if m.tpot_s is not None],
    }


# ---- the runs -------------------------------------------------------------------------------------


def routing_of(policy: str) -> str | dict[str, Any]:
    if policy == "blended_precise":
        return "precise"  # its `prefix` is the precise match wherever the engine is loaded: all of a run
    if policy == "blended":
        return {"scorers": {"prefix_approx": 3.0, **LOAD_WEIGHTS}}
    return policy


def native_model(policy: str) -> str:
    return f"native-{policy}"


def gateway_config(
    cfg: RoutingBenchConfig, sims: dict[str, Server], port: int, ports: dict[str, SimPorts] | None = None
) -> dict[str, Any]:
    listen = {"listen": {"host": "127.0.0.1", "port": port}, "auth": {"mode": "none"}, "log_level": cfg.log_level}
    backends = sim_backends(cfg, {n: s.base_url for n, s in sims.items()}, ports or {})
    models: dict[str, Any] = {p: {"routing": routing_of(p), "backends": backends} for p in cfg.policies if sims}
    # A served_model each: native backends of one model path and name would share one engine.
    # max_model_len as the simulators' engines have it (their default).
    natives = [
        {
            "name": n,
            "adapter": "native",
            "model_path": "builtin:tiny",
            "served_model": f"tiny-{i}",
            "max_inflight": 64,
            "options": {"max_model_len": 4096},
        }
        for i, n in enumerate(NATIVE)
    ]
    for p in cfg.native_policies:
        models[native_model(p)] = {"routing": routing_of(p), "backends": natives}
    if not sims:
        return {**listen, "models": models}
    # The blended profile's weights (policies/profiles.py), with the bound under test.
    weights = {"prefix": 3.0, **LOAD_WEIGHTS}
    models["hot"] = {"routing": {"scorers": weights, "load_factor": cfg.load_factor}, "backends": backends}
    # Round robin keeps sending the dead backend its share until the health probe (5 s) sees it:
    # the failover path, not the probe, is what the kill run measures.
    models["kill"] = {"routing": "round_robin", "backends": backends}
    return {**listen, "models": models}


async def one_run(
    cfg: RoutingBenchConfig,
    gw: str,
    counters: Counters,
    model: str,
    rate: float,
    tag: str,
    hot: bool = False,
    kill: Server | None = None,
    pool: str = "simulators",
) -> dict[str, Any]:
    backends, duration = (NATIVE, cfg.native_duration_s) if pool == "native" else (BACKENDS, cfg.duration_s)
    count = max(2, round(rate * duration))
    tokens = pool == "simulators" and cfg.source == "modelled"
    convs = token_sessions(cfg, tag, count, hot) if tokens else sessions(cfg, tag, count, hot)
    arrivals = poisson_arrivals(count, rate, seed=cfg.seed)
    before = counters()
    samples: list[dict[str, float]] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_inflight(gw, backends, samples, stop))
    send = run_token_load if tokens else run_load
    load = asyncio.create_task(send(gw, model, convs, arrivals, cfg.max_tokens))
    if kill is not None:
        await asyncio.sleep(duration / 2)
        kill.child.kill()  # type: ignore[union-attr]
    records = await load
    stop.set()
    await sampler
    after = counters() if kill is not None else await settled(counters, before, len(records))
    result = summarize(records, before, after, cfg.slo, duration)
    result.update({"model": model, "rate": rate, "tag": tag, "pool": pool, "duration_s": duration})
    if cfg.native_only:  # per request, to see which ones make the tail: sent at, TTFT, prompt and cached tokens
        result["per_request"] = [
            (r.session, r.turn, r.sent_s, m.ttft_s, r.usage_prompt_tokens, r.cached_tokens)
            for r in records
            if (m := request_metrics(r)) is not None
        ]
    if samples:
        # The bound, as the pick applies it: no backend past ceil(load_factor x its share of what is in flight).
        within = [max(s.values()) <= math.ceil(cfg.load_factor * sum(s.values()) / len(BACKENDS)) for s in samples]
        result["inflight_samples"] = len(samples)
        result["inflight_within_bound"] = sum(within) / len(within)
        result["inflight_mean_total"] = sum(sum(s.values()) for s in samples) / len(samples)
    if kill is not None:
        failed = [r for r in records if r.outcome == "failed"]
        result["lost_before_streaming"] = sum(not r.chunk_times for r in failed)
        result["cut_mid_stream"] = sum(bool(r.chunk_times) for r in failed)
        # Attempts on the dead backend that failed before their first byte: each was failed over.
        result["failed_over"] = gateway_counter(gw, "switchyard_backend_failures_total", kill.name)
        result["ejections"] = gateway_counter(gw, "switchyard_backend_ejections_total", kill.name, f'model="{model}"')
    return result


async def bench(cfg: RoutingBenchConfig) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="routing-bench-"))  # the servers' logs, kept out of the report
    sims, ports = ({}, {}) if cfg.native_only else start_sims(cfg, logs)
    started: list[Server] = []
    try:
        for s in sims.values():
            started.append(s.__enter__())
        port = free_port()
        config_path = logs / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(gateway_config(cfg, sims, port, ports)))
        gateway = Server(
            "gateway",
            python_module("gateway.cli", "serve", "--config", str(config_path)),
            f"http://127.0.0.1:{port}/healthz",
            logs,
            # One thread per engine, as each simulator has; the gateway loads its engines before it answers.
            env=one_thread(),
            ready_timeout_s=180,
        )
        with gateway:
            gw = gateway.base_url

            def sim_pool() -> dict[str, dict[str, float]]:
                return sim_counters(sims)

            def native_pool() -> dict[str, dict[str, float]]:
                return native_counters(gw)

            runs, native_runs = [], []
            for rate in () if cfg.native_only else cfg.sim_rates:
                # A label per repetition too: the same workload, but no run finds what another cached.
                for k, policy in schedule(cfg.policies, cfg.sim_repeats):
                    runs.append(await one_run(cfg, gw, sim_pool, policy, rate, f"{policy}@{rate:g}#{k}"))
                    runs[-1].update({"policy": policy, "repetition": k})
            for rate in cfg.rates:
                for k, policy in schedule(cfg.native_policies, cfg.repeats):
                    tag = f"native-{policy}@{rate:g}#{k}"
                    native_runs.append(
                        await one_run(cfg, gw, native_pool, native_model(policy), rate, tag, pool="native")
                    )
                    native_runs[-1].update({"policy": policy, "repetition": k})
            pooled = {"pooled": pool(runs), "native_pooled": pool(native_runs)}
            if cfg.native_only:
                return {"config": _config(cfg), "runs": runs, "native_runs": native_runs, **pooled, "logs": str(logs)}
            hot = await one_run(cfg, gw, sim_pool, "hot", max(cfg.sim_rates), "hot", hot=True)
            killed = await one_run(cfg, gw, sim_pool, "kill", max(cfg.sim_rates), "kill", kill=sims[BACKENDS[-1]])
    finally:
        for s in started:
            s.__exit__(None, None, None)
    return {"config": _config(cfg), "runs": runs, "native_runs": native_runs, **pooled, "hot": hot, "kill": killed}


def _config(cfg: RoutingBenchConfig) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=RoutingBenchConfig.out_dir)
    p.add_argument("--source", choices=("modelled", "engine", "synthetic"), default="modelled", help="the simulators")
    p.add_argument("--duration", type=float, default=RoutingBenchConfig.duration_s, help="seconds of arrivals per run")
    p.add_argument("--sim-rates", default=None, help="sessions per second over the simulators (light,heavy)")
    p.add_argument("--rates", default="1,5", help="sessions per second over the native engines (light,heavy)")
    p.add_argument("--policies", default=None, help=f"over the simulators, of {POLICIES} (default: all they can run)")
    p.add_argument(
        "--native-policies",
        default=",".join(NATIVE_POLICIES),
        help=f"over the native engines, of {NATIVE_POLICIES}; empty leaves the native pool out",
    )
    p.add_argument("--native-duration", type=float, default=RoutingBenchConfig.native_duration_s)
    # The modelled pool's device and workload (bench/routing_sims.py, bench/routing_tokens.py).
    model = ("sim_ttft_ms", "prefill_ms_per_token", "sim_itl_ms", "gpu_blocks", "system_tokens", "user_tokens")
    for name in ("turns", "system_words", "seed", "repeats", "sim_repeats", *model):
        default = getattr(RoutingBenchConfig, name)
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    p.add_argument(
        "--native-only",
        action="store_true",
        help="only the native pool (no simulators, hot-prefix or kill run): its table printed, result.json written",
    )
    p.add_argument("--gateway-log-level", default="info", help="debug: the gateway logs each scored routing decision")
    a = p.parse_args(argv)
    sim_can = POLICIES if a.source == "modelled" else UNEVENTED_POLICIES
    policies = tuple(x for x in (a.policies or ",".join(sim_can)).split(",") if x)
    native_policies = tuple(x for x in a.native_policies.split(",") if x)
    if not set(policies) <= set(sim_can) or not set(native_policies) <= set(NATIVE_POLICIES):
        p.error(f"--policies: of {sim_can} (source {a.source}); --native-policies: of {NATIVE_POLICIES}")
    if a.repeats < 1 or a.sim_repeats < 1:
        p.error("--repeats and --sim-repeats: at least 1")
    sim_rates = a.sim_rates or (
        "1,5" if a.source == "engine" else ",".join(f"{r:g}" for r in RoutingBenchConfig.sim_rates)
    )
    cfg = RoutingBenchConfig(
        out_dir=a.out,
        source=a.source,
        duration_s=a.duration,
        sim_rates=tuple(float(r) for r in sim_rates.split(",")),
        rates=tuple(float(r) for r in a.rates.split(",")),
        policies=policies,
        native_policies=native_policies,
        native_duration_s=a.native_duration,
        native_only=a.native_only,
        log_level=a.gateway_log_level,
        **{n: getattr(a, n) for n in ("turns", "system_words", "seed", "repeats", "sim_repeats", *model)},
    )
    started = time.perf_counter()
    result = asyncio.run(bench(cfg))
    result["wall_s"] = round(time.perf_counter() - started, 1)
    if cfg.native_only:
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        (cfg.out_dir / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        print("\n".join(table(result["native_pooled"])))
        print(f"gateway log: {result['logs']}/gateway.log; wall {result['wall_s']} s")
        return 0
    for path in write_report(result, cfg.out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
