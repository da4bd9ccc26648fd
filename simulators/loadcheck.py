"""Measure how many requests per second a simulator serves (the synthetic source is
meant for load tests, so it must not be the bottleneck).

    python -m simulators.loadcheck http://127.0.0.1:8000 --requests 5000 --concurrency 64 [--stream]

Prints requests/s and the status counts; it does not judge the numbers.
"""
from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter

import aiohttp


async def run(url: str, requests: int, concurrency: int, stream: bool, max_tokens: int) -> dict[str, object]:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "hello load test"}],
            "max_tokens": max_tokens, "stream": stream}
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
    return {"requests": requests, "seconds": round(elapsed, 3), "rps": round(requests / elapsed, 1),
            "statuses": dict(statuses)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m simulators.loadcheck")
    parser.add_argument("url")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    print(asyncio.run(run(args.url.rstrip("/"), args.requests, args.concurrency, args.stream, args.max_tokens)))


if __name__ == "__main__":
    main()
