"""`make bench-overhead`'s Responses rows: the latency of `POST /v1/responses`
through the gateway next to chat's, closed loop at concurrency 1, on the same fast
upstream (the gateway turns the Responses request into a chat generation, so the
upstream work is the same 16 chunks).

One plain loop times all three paths alike (the direct upstream's chat, the
gateway's chat, the gateway's Responses), each request to its last byte, so the
client's own cost is the same on each and the differences are the gateway's. The
paths take turns request by request (one keep-alive connection each, the order
rotated every turn), so a change of machine load hits them alike: with blocks of
200 requests per path, the Responses-minus-chat p50 of one run moved by up to
0.1 ms between runs on the shared 2-core machine, as much as the target itself.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import aiohttp
import orjson


def chat_body(model: str, prompt: str, stream: bool) -> bytes:
    return orjson.dumps(
        {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 16, "stream": stream}
    )


def responses_body(model: str, prompt: str, stream: bool) -> bytes:
    # store: false keeps the response store out of the figure (a stored response is one write more).
    return orjson.dumps({"model": model, "input": prompt, "max_output_tokens": 16, "stream": stream, "store": False})


async def _turns(
    paths: dict[str, tuple[str, bytes]], stream: bool, n: int
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """`n` requests on each path, one at a time, the paths taking turns."""
    latencies: dict[str, list[float]] = {name: [] for name in paths}
    failed = dict.fromkeys(paths, 0)
    timeout = aiohttp.ClientTimeout(total=30)
    sessions = {name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout) for name in paths}
    order = list(paths)
    try:
        for turn in range(n):
            for name in order[turn % len(order) :] + order[: turn % len(order)]:
                url, payload = paths[name]
                started = time.perf_counter()
                async with sessions[name].post(url, data=payload, headers={"content-type": "application/json"}) as resp:
                    raw = await resp.read()
                if resp.status == 200 and (not stream or raw.endswith(b"\n\n")):
                    latencies[name].append((time.perf_counter() - started) * 1000)
                else:
                    failed[name] += 1
    finally:
        for session in sessions.values():
            await session.close()
    return latencies, failed


def compare(direct: str, gateway: str, model: str, prompt: str, stream: bool, n: int, rounds: int) -> dict[str, Any]:
    """p50/p99 of the three paths, and what the gateway adds to each API over direct chat."""
    paths = {
        "direct chat": (direct + "/v1/chat/completions", chat_body(model, prompt, stream)),
        "gateway chat": (gateway + "/v1/chat/completions", chat_body(model, prompt, stream)),
        "gateway responses": (gateway + "/v1/responses", responses_body(model, prompt, stream)),
    }
    pooled: dict[str, list[float]] = {name: [] for name in paths}
    failed = dict.fromkeys(paths, 0)
    for _ in range(rounds):  # each round on new connections
        got, bad = asyncio.run(_turns(paths, stream, max(1, n // rounds)))
        for name in paths:
            pooled[name] += got[name]
            failed[name] += bad[name]
    out = {name: summary(pooled[name], failed[name]) for name in paths}
    base = out["direct chat"]["e2e_p50_ms"]
    for name in ("gateway chat", "gateway responses"):
        out[name]["added_p50_ms"] = out[name]["e2e_p50_ms"] - base
    out["responses_minus_chat_p50_ms"] = out["gateway responses"]["e2e_p50_ms"] - out["gateway chat"]["e2e_p50_ms"]
    return out


def summary(latencies: list[float], failed: int) -> dict[str, Any]:
    if not latencies:
        return {"e2e_p50_ms": float("nan"), "e2e_p99_ms": float("nan"), "failed": failed}
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"e2e_p50_ms": statistics.median(ordered), "e2e_p99_ms": p99, "failed": failed}
