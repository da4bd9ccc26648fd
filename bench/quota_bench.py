"""`python -m bench.quota_bench`: what tenancy protection costs, and whether
fairness holds under overload. Three parts, each on real processes:

1. In process: `Protection.admit` + `Ticket.release` per request, for a tenant
   with no limits (no store call), with the memory store and with Redis (a real
   redis-server). Sequential latency per check (p50/p99, microseconds) and
   checks per second at 64 concurrent. The quota check is too small to see
   through HTTP noise alone, so this part times it inside the gateway's code:
   `bench.internal.quota_check`, run as a child process (this module, like the
   rest of bench/, imports neither gateway/ nor adapters/).
2. Through the gateway: non-streaming latency at concurrency 1 through three
   gateway processes in front of one fast upstream, identical but for the
   tenant's limits (none, memory store, Redis store); rounds alternate so that
   machine noise hits all three alike. Added = limited - unlimited.
3. Fairness under overload: one gateway, backend capacity 2 in flight in front
   of an upstream that takes 400 ms per answer (5 answers/s, so a fair share
   is 2.5/s per tenant). The quiet tenant sends at half its share,
   the flood tenant at 10x its share, open loop, from its own process (so its
   load generator cannot delay the quiet tenant's timestamps). Reported: the
   quiet tenant's success rate and p50/p99 latency, against the quiet tenant
   alone.

Prints the figures and writes reports/quota/quota_bench.md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.procs import ROOT, Server, python_module
from bench.quota_setup import KEYS, LIMITS, MODEL, config, pct
from bench.report import write_json
from processes import Child, free_port, redis_ping, redis_server_argv

# ---- processes -------------------------------------------------------------------


@contextmanager
def redis_server(log_dir: Path) -> Iterator[str]:
    """A real redis-server for the `with` block; yields its URL."""
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed; the Redis figures need a real one")
    port = free_port()
    with Child(redis_server_argv(port, log_dir), log_dir / "redis.log", name="redis-server") as redis:
        redis.wait_ready(redis_ping(port), timeout_s=10)
        yield f"redis://127.0.0.1:{port}/0"


def gateway(name: str, cfg: dict, out: Path) -> Server:
    port = free_port()
    cfg = {**cfg, "listen": {"host": "127.0.0.1", "port": port}}
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return Server(
        name, python_module("gateway.cli", "serve", "--config", str(path)), f"http://127.0.0.1:{port}/healthz", out
    )


def upstream(name: str, out: Path, ttft_ms: float = 0.0) -> Server:
    port = free_port()
    return Server(
        name,
        python_module(
            "gateway.cli", "simulate", "openai", "--port", str(port), "--chunks", "16", "--ttft-ms", str(ttft_ms)
        ),
        f"http://127.0.0.1:{port}/health",
        out,
    )


# ---- part 1: the check itself, in its own process -----------------------------------


def check_cost(redis_url: str, checks: int, logs: Path) -> dict[str, dict[str, float]]:
    figures = logs / "check_cost.json"
    command = python_module(
        "bench.internal.quota_check", "--redis-url", redis_url, "--checks", str(checks), "--json", str(figures)
    )
    subprocess.run(command, cwd=ROOT, check=True)
    return json.loads(figures.read_text())


# ---- HTTP helpers ---------------------------------------------------------------------


@dataclass
class Outcome:
    status: int
    latency_s: float


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)

    def ok(self) -> list[float]:
        return [o.latency_s for o in self.outcomes if o.status == 200]

    def summary(self) -> dict[str, Any]:
        sent = len(self.outcomes)
        ok = self.ok()
        statuses: dict[str, int] = {}
        for o in self.outcomes:
            statuses[str(o.status)] = statuses.get(str(o.status), 0) + 1
        return {
            "sent": sent,
            "ok": len(ok),
            "success_rate": len(ok) / sent if sent else float("nan"),
            "p50_ms": pct(ok, 50) * 1000,
            "p99_ms": pct(ok, 99) * 1000,
            "statuses": statuses,
        }


BODY = orjson.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": "Say hello to the benchmark."}], "max_tokens": 16}
)


async def post(session: aiohttp.ClientSession, url: str, tenant: str) -> Outcome:
    t0 = time.perf_counter()
    try:
        async with session.post(
            url + "/v1/chat/completions",
            data=BODY,
            headers={"authorization": f"Bearer {KEYS[tenant]}", "content-type": "application/json"},
        ) as resp:
            await resp.read()
            return Outcome(resp.status, time.perf_counter() - t0)
    except (TimeoutError, aiohttp.ClientError):
        return Outcome(0, time.perf_counter() - t0)


# ---- part 2: through the gateway ------------------------------------------------------


async def http_cost(targets: dict[str, str], n: int) -> dict[str, dict[str, float]]:
    """Request by request across the targets in turn, so that a noisy moment on
    this shared machine lands on all of them alike."""
    lat: dict[str, list[float]] = {name: [] for name in targets}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        names = list(targets)
        for i in range(n + 50):
            # Rotate who goes first: the first request after another server's
            # turn pays for waking its process up.
            for name in names[i % len(names) :] + names[: i % len(names)]:
                url = targets[name]
                o = await post(session, url, "free" if name == "no limits" else "quiet")
                if o.status != 200:
                    raise RuntimeError(f"{name}: HTTP {o.status}")
                if i >= 50:  # the first 50 rounds warm connections and caches
                    lat[name].append(o.latency_s)
    return {name: {"p50_ms": pct(v, 50) * 1000, "p99_ms": pct(v, 99) * 1000, "n": len(v)} for name, v in lat.items()}


# ---- part 3: fairness under overload -----------------------------------------------------


async def open_loop(
    session: aiohttp.ClientSession, url: str, tenant: str, rate: float, duration_s: float, tally: Tally
) -> None:
    tasks = []
    start = time.perf_counter()
    for i in range(int(rate * duration_s)):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(post(session, url, tenant)))
    tally.outcomes.extend(await asyncio.gather(*tasks))


def _flood_process(url: str, rate: float, duration_s: float, delay_s: float, results) -> None:
    """The flood's load generator, in its own process: its thousands of answers
    must not slow down the event loop that times the quiet tenant."""

    async def go() -> None:
        await asyncio.sleep(delay_s)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60), connector=connector) as session:
            tally = Tally()
            await open_loop(session, url, "flood", rate, duration_s, tally)
        results.send(tally.summary())

    asyncio.run(go())


async def fairness(url: str, duration_s: float, quiet_rate: float, flood_rate: float) -> dict[str, Any]:
    import multiprocessing

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        alone = Tally()
        await open_loop(session, url, "quiet", quiet_rate, duration_s, alone)
        receiver, sender = multiprocessing.Pipe(duplex=False)
        flood_proc = multiprocessing.get_context("spawn").Process(
            target=_flood_process, args=(url, flood_rate, duration_s + 2, 0.0, sender)
        )
        flood_proc.start()
        await asyncio.sleep(2)  # the flood fills the queue first
        quiet = Tally()
        await open_loop(session, url, "quiet", quiet_rate, duration_s, quiet)
        flood = await asyncio.to_thread(receiver.recv)
        flood_proc.join(10)
    return {"quiet_alone": alone.summary(), "quiet_under_flood": quiet.summary(), "flood": flood}


# ---- report -------------------------------------------------------------------------------


def render(doc: dict[str, Any]) -> str:
    lines = [
        "# Tenancy protection: cost and fairness",
        "",
        f"Measured {doc['when']} on {doc['cpus']} CPU(s) (load average {doc['load_average_at_start']:.1f} at "
        f"the start: other work shared the machine) with `{doc['command'].strip()}`.",
        "",
        "## 1. The quota check in process (admit + release)",
        "",
        "| store | p50 (µs) | p99 (µs) | checks/s at 64 concurrent |",
        "|---|---|---|---|",
    ]
    for name, r in doc["check_cost"].items():
        lines.append(f"| {name} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['checks_per_s']:.0f} |")
    lines += [
        "",
        "## 2. Through the gateway (non-streaming, concurrency 1)",
        "",
        "| tenant limits | p50 (ms) | p99 (ms) | added p50 (ms) | added p99 (ms) |",
        "|---|---|---|---|---|",
    ]
    base = doc["http_cost"]["no limits"]
    for name, r in doc["http_cost"].items():
        lines.append(
            f"| {name} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['p50_ms'] - base['p50_ms']:+.3f} | "
            f"{r['p99_ms'] - base['p99_ms']:+.3f} |"
        )
    f = doc["fairness"]
    lines += [
        "",
        "## 3. Fairness under overload",
        "",
        f"Backend capacity {f['setup']['capacity']} in flight, {f['setup']['upstream_ttft_ms']:.0f} ms per "
        f"answer ({f['setup']['capacity_rps']:g} answers/s, fair share "
        f"{f['setup']['capacity_rps'] / 2:g}/s each). Quiet tenant at {f['setup']['quiet_rps']:g}/s, "
        f"flood at {f['setup']['flood_rps']:g}/s (10x its share; starts 2 s earlier to fill the queue, "
        "from its own process), "
        f"{f['setup']['duration_s']:g} s each, open loop. Queue: "
        f"{f['setup']['max_queue']} places, {f['setup']['max_queue_wait_s']:g} s deadline.",
        "",
        "| traffic | sent | success rate | p50 (ms) | p99 (ms) | statuses |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("quiet_alone", "quiet_under_flood", "flood"):
        r = f[name]
        lines.append(
            f"| {name.replace('_', ' ')} | {r['sent']} | {r['success_rate']:.1%} | {r['p50_ms']:.0f} | "
            f"{r['p99_ms']:.0f} | {r['statuses']} |"
        )
    lines += [
        "",
        "Definitions: latency is from sending the request to reading the whole answer; success is "
        "HTTP 200; p50/p99 are over successful requests (nearest rank). Added = limited - unlimited, "
        "same rounds, alternating.",
        "",
    ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="quota-bench-"))
    doc: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "command": "python -m bench.quota_bench " + " ".join(args.argv),
        "load_average_at_start": os.getloadavg()[0],
    }
    with redis_server(logs) as redis_url:
        redis_store = {"kind": "redis", "url": redis_url}
        memory_store = {"kind": "memory"}
        doc["check_cost"] = check_cost(redis_url, args.checks, logs)
        tenants = {"quiet": dict(LIMITS), "flood": dict(LIMITS), "free": {}}
        with upstream("upstream-fast", logs) as up:
            with (
                gateway("gw-memory", config(up.base_url, memory_store, tenants), logs) as gw_mem,
                gateway("gw-redis", config(up.base_url, redis_store, tenants), logs) as gw_redis,
            ):
                targets = {"no limits": gw_mem.base_url, "memory": gw_mem.base_url, "redis": gw_redis.base_url}
                doc["http_cost"] = await http_cost(targets, args.http_requests)
        base = doc["http_cost"]["no limits"]
        for name, r in doc["http_cost"].items():
            print(
                f"http   {name:28s} p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  "
                f"added p50 {r['p50_ms'] - base['p50_ms']:+.3f} ms"
            )
    capacity, ttft_ms = 2, args.answer_ms
    capacity_rps = capacity * 1000 / ttft_ms
    setup = {
        "capacity": capacity,
        "upstream_ttft_ms": ttft_ms,
        "capacity_rps": capacity_rps,
        "quiet_rps": capacity_rps / 2 / 2,
        "flood_rps": capacity_rps / 2 * 10,
        "duration_s": args.duration,
        "max_queue": 32,
        "max_queue_wait_s": 5.0,
    }
    fair_tenants = {"quiet": {"tier": 1}, "flood": {"tier": 1}, "free": {}}
    with (
        upstream("upstream-slow", logs, ttft_ms=ttft_ms) as slow,
        gateway(
            "gw-fair",
            config(
                slow.base_url,
                {"kind": "memory"},
                fair_tenants,
                max_inflight=capacity,
                admission={"max_queue": setup["max_queue"], "max_queue_wait_s": setup["max_queue_wait_s"]},
            ),
            logs,
        ) as gw,
    ):
        doc["fairness"] = {
            "setup": setup,
            **await fairness(gw.base_url, args.duration, setup["quiet_rps"], setup["flood_rps"]),
        }
    for name in ("quiet_alone", "quiet_under_flood", "flood"):
        r = doc["fairness"][name]
        print(
            f"fair   {name:28s} success {r['success_rate']:.1%}  p50 {r['p50_ms']:.0f} ms  "
            f"p99 {r['p99_ms']:.0f} ms  {r['statuses']}"
        )
    write_json(out / "quota_bench.json", doc)
    (out / "quota_bench.md").write_text(render(doc))
    print(f"wrote {out / 'quota_bench.md'}")
    return doc


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m bench.quota_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="reports/quota")
    p.add_argument("--checks", type=int, default=3000, help="quota checks per store (part 1)")
    p.add_argument("--http-requests", type=int, default=1000, help="requests per gateway variant (part 2)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per fairness run (part 3)")
    # Slow answers keep part 3 about fairness, not about the CPU: on a small
    # shared machine a fast upstream makes the gateway's own CPU the bottleneck.
    p.add_argument("--answer-ms", type=float, default=400.0, help="upstream time per answer in part 3")
    args = p.parse_args(argv)
    args.argv = argv
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
