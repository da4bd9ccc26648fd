"""`python -m bench.internal.quota_check --redis-url URL`: what the quota check
itself costs, in process: `Protection.admit` + `Ticket.release` per request, for
a tenant with no limits (no store call), with the memory store and with Redis.
Sequential latency per check (p50/p99, microseconds) and checks per second at
`--concurrency` concurrent. Part 1 of `bench.quota_bench`, which runs it as a
child process; `--json` writes the figures for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from adapters.base import GenerationRequest, SamplingParams
from bench.quota_setup import KEYS, LIMITS, MODEL, config, pct
from gateway.config.schema import parse_config
from gateway.protection.gate import Protection


async def check_cost(store_cfg: dict, tenant: str, n: int, concurrency: int) -> dict[str, float]:
    tenants = {"quiet": dict(LIMITS), "flood": dict(LIMITS), "free": {}}
    p = Protection(parse_config(config("http://127.0.0.1:1", store_cfg, tenants)), CollectorRegistry())
    await p.start()
    headers = {"authorization": f"Bearer {KEYS[tenant]}"}
    principal = await p.authenticate(headers)
    request = GenerationRequest(
        request_id="bench",
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        sampling=SamplingParams(max_tokens=16),
    )

    async def never_gone() -> bool:
        return False

    async def one() -> float:
        t0 = time.perf_counter()
        ticket = await p.admit(principal, MODEL, request, 8, never_gone)
        await ticket.release(None)
        return time.perf_counter() - t0

    for _ in range(min(200, n)):  # warm the connection pool and the script cache
        await one()
    latencies = [await one() for _ in range(n)]
    t0 = time.perf_counter()
    done = 0

    async def worker() -> None:
        nonlocal done
        while done < n:
            done += 1
            await one()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    await p.aclose()
    return {
        "p50_us": pct(latencies, 50) * 1e6,
        "p99_us": pct(latencies, 99) * 1e6,
        "mean_us": statistics.fmean(latencies) * 1e6,
        "checks_per_s": n / elapsed,
    }


async def all_stores(redis_url: str, n: int, concurrency: int) -> dict[str, dict[str, float]]:
    memory_store = {"kind": "memory"}
    return {
        "no limits (no store call)": await check_cost(memory_store, "free", n, concurrency),
        "memory": await check_cost(memory_store, "quiet", n, concurrency),
        "redis": await check_cost({"kind": "redis", "url": redis_url}, "quiet", n, concurrency),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.internal.quota_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--redis-url", required=True, help="a running redis-server, e.g. redis://127.0.0.1:6379/0")
    p.add_argument("--checks", type=int, default=3000, help="quota checks per store")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    args = p.parse_args(argv)
    results = asyncio.run(all_stores(args.redis_url, args.checks, args.concurrency))
    for name, r in results.items():
        print(
            f"check  {name:28s} p50 {r['p50_us']:7.0f} µs  p99 {r['p99_us']:7.0f} µs  "
            f"{r['checks_per_s']:8.0f} checks/s",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
