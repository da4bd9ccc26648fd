"""Measure how many requests per second a simulator serves (the synthetic source is
meant for load tests, so it must not be the bottleneck).

    python -m simulators.loadcheck http://127.0.0.1:8000 --requests 5000 --concurrency 64 [--stream]
    python -m simulators.loadcheck --kind vllm --requests 3000     # starts its own simulator

Prints requests/s and the status counts; it does not judge the numbers. With
`--kind` it also reports the simulator's own CPU time per request (Linux
`/proc`), which says how fast the server would go if the load generator did not
share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import Counter

import aiohttp


async def run(url: str, requests: int, concurrency: int, stream: bool, max_tokens: int) -> dict[str, object]:
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "hello load test"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    statuses: Counter[int] = Counter()
    remaining = iter(range(requests))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for _ in remaining:
                async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                    await resp.read()
                    statuses[resp.status] += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "requests": requests,
        "seconds": round(elapsed, 3),
        "rps": round(requests / elapsed, 1),
        "statuses": dict(statuses),
    }


def process_cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m simulators.loadcheck")
    parser.add_argument("url", nargs="?", help="a running simulator (or use --kind)")
    parser.add_argument("--kind", choices=("vllm", "sglang", "trtllm", "tgi"), help="start this simulator")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    if args.kind is None:
        if not args.url:
            parser.error("give a URL or --kind")
        print(asyncio.run(run(args.url.rstrip("/"), args.requests, args.concurrency, args.stream, args.max_tokens)))
        return
    from simulators.testing import start_simulator

    sim = start_simulator(args.kind)
    try:
        before = process_cpu_seconds(sim.process.pid)
        result = asyncio.run(run(sim.url, args.requests, args.concurrency, args.stream, args.max_tokens))
        cpu = process_cpu_seconds(sim.process.pid) - before
    finally:
        sim.stop()
    result["server_cpu_ms_per_request"] = round(cpu / args.requests * 1000, 3)
    result["server_bound_rps_per_core"] = round(args.requests / cpu) if cpu else None
    print({"kind": args.kind, "stream": args.stream, **result})


if __name__ == "__main__":
    main()
