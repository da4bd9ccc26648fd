"""The simulator pool of `make bench-routing` (bench/routing_bench.py): three vLLM
simulators of one model, and the gateway backends that front them.

`modelled` (the default): each simulator is a modelled GPU (`--source synthetic`
with `--prefill-ms-per-token`): its prefills are serialized in arrival order, each
holding the device for `sim_ttft_ms` + `prefill_ms_per_token` x the prompt tokens
its prefix cache does not hold, and decode sleeps `sim_itl_ms` a token. All of it
sleeps, so three simulators are three independent devices even on a 2-core machine,
which real engines there are not (the native pool's engines share the cores and the
interpreter). Its cache is bounded (`--num-gpu-blocks-override`, LRU) and it
publishes vLLM's KV-cache events over ZMQ, which the gateway backend subscribes to
(`kv_events`), so `blended_precise` runs here too. The workload is token ids
(bench/routing_tokens.py).

`engine`: the native engine on builtin:tiny generates (real prefill, a real prefix
cache), no KV events, a text workload. `synthetic`: fixed timing, no cache model."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.procs import Server, python_module
from bench.routing_config import RoutingBenchConfig
from processes import free_port

BACKENDS = ("sim0", "sim1", "sim2")
BLOCK_SIZE = 16  # vLLM's default, the simulators' too


@dataclass(frozen=True)
class SimPorts:
    http: int
    pub: int = 0  # KV events: ZMQ PUB (modelled only)
    replay: int = 0  # and its ROUTER replay socket


def sim_argv(cfg: RoutingBenchConfig, ports: SimPorts) -> list[str]:
    """The command line of one simulator of the pool."""
    argv = python_module(
        "gateway.cli.main",
        "simulate",
        "vllm",
        "--port",
        str(ports.http),
        "--model-name",
        "sim-model",
        "--output-tokens",
        str(cfg.max_tokens),
    )
    if cfg.source == "engine":
        return argv + ["--source", "engine", "--model-dir", "builtin:tiny"]
    if cfg.source == "synthetic":
        return argv + ["--ttft-ms", "20", "--itl-ms", "5"]
    # Wildcard endpoints, as a real vLLM needs them to bind (it connects otherwise); the gateway
    # connects to 127.0.0.1 (sim_backends).
    kv = (
        '{"enable_kv_cache_events":true,"publisher":"zmq",'
        f'"endpoint":"tcp://*:{ports.pub}","replay_endpoint":"tcp://*:{ports.replay}","topic":""}}'
    )
    return argv + [
        "--source",
        "synthetic",
        "--ttft-ms",
        f"{cfg.sim_ttft_ms:g}",
        "--itl-ms",
        f"{cfg.sim_itl_ms:g}",
        "--prefill-ms-per-token",
        f"{cfg.prefill_ms_per_token:g}",
        "--num-gpu-blocks-override",
        str(cfg.gpu_blocks),
        "--kv-events-config",
        kv,
    ]


def sim_backends(cfg: RoutingBenchConfig, urls: dict[str, str], ports: dict[str, SimPorts]) -> list[dict[str, Any]]:
    """The gateway's backends over the simulators: modelled ones with `kv_events` (their
    PUB and replay sockets, block size 16), so that the `precise` profile reads what
    each one's cache holds."""
    out = []
    for name, url in urls.items():
        b: dict[str, Any] = {"name": name, "adapter": "vllm", "url": url, "served_model": "sim-model"}
        b["max_inflight"] = 64
        if cfg.source == "modelled":
            p = ports[name]
            b["kv_events"] = {
                "endpoint": f"tcp://127.0.0.1:{p.pub}",
                "replay_endpoint": f"tcp://127.0.0.1:{p.replay}",
                "block_size": BLOCK_SIZE,
            }
        out.append(b)
    return out


def start_sims(cfg: RoutingBenchConfig, logs: Path) -> tuple[dict[str, Server], dict[str, SimPorts]]:
    """The servers (not yet started: enter each) and their ports."""
    sims, ports = {}, {}
    for name in BACKENDS:
        p = SimPorts(free_port(), free_port(), free_port()) if cfg.source == "modelled" else SimPorts(free_port())
        ports[name] = p
        url = f"http://127.0.0.1:{p.http}/health"
        sims[name] = Server(name, sim_argv(cfg, p), url, logs, env=one_thread(), ready_timeout_s=180)
    return sims, ports


def one_thread() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def sim_counters(sims: dict[str, Server]) -> dict[str, dict[str, float]]:
    """Per simulator: requests served and its prefix cache's counters (tokens looked up,
    tokens found) and, for a bounded cache, the blocks it evicted, from `/_sim/stats`
    (the same as vLLM's `vllm:prefix_cache_*`)."""
    out = {}
    for name, sim in sims.items():
        try:
            s = httpx.get(sim.base_url + "/_sim/stats", timeout=10).json()
        except httpx.HTTPError:
            continue  # a killed backend
        kv = s.get("kv_cache") or {}  # the modelled simulators' bounded cache
        out[name] = {"requests": s["requests_total"], **s["prefix_cache"], "evicted": kv.get("evicted", 0)}
    return out
