"""Which HTTP client for the gateway's upstream calls: aiohttp, httpx, or the
gateway's own keep-alive client (adapters/http_client.py), measured side by side
in one run against the same fast upstream.

    python -m bench.client_choice [--requests N]   (runs this module as a child process)

Prints requests/s for sequential non-streaming requests and for 16-chunk
streams read line by line, with each client's cost relative to the fastest.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

from adapters.http_client import ConnectionPool
from bench.procs import Server, python_module
from processes import free_port

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16}'
STREAM_BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}'
HEADERS = {"Content-Type": "application/json"}


async def run_aiohttp(url: str, n: int, stream: bool) -> float:
    async with aiohttp.ClientSession() as s:
        t = time.perf_counter()
        for _ in range(n):
            async with s.post(url, data=STREAM_BODY if stream else BODY, headers=HEADERS) as r:
                if stream:
                    async for _line in r.content:
                        pass
                else:
                    await r.read()
        return time.perf_counter() - t


async def run_httpx(url: str, n: int, stream: bool) -> float:
    async with httpx.AsyncClient() as c:
        t = time.perf_counter()
        for _ in range(n):
            if stream:
                async with c.stream("POST", url, content=STREAM_BODY, headers=HEADERS) as r:
                    async for _line in r.aiter_lines():
                        pass
            else:
                (await c.post(url, content=BODY, headers=HEADERS)).read()
        return time.perf_counter() - t


async def run_own(url: str, n: int, stream: bool) -> float:
    pool = ConnectionPool(url.rsplit("/v1", 1)[0])
    t = time.perf_counter()
    for _ in range(n):
        r = await pool.request("POST", "/v1/chat/completions", STREAM_BODY if stream else BODY, HEADERS)
        if stream:
            async for _line in r.iter_lines():
                pass
        else:
            await r.read()
        r.release()
    elapsed = time.perf_counter() - t
    pool.close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.client_choice", description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    import uvloop

    port = free_port()
    with Server(
        "upstream",
        python_module("simulators.openai_upstream", "--port", str(port), "--chunks", "16"),
        f"http://127.0.0.1:{port}/health",
        Path(tempfile.mkdtemp()),
    ):
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        clients = {"aiohttp": run_aiohttp, "httpx": run_httpx, "switchyard http_client": run_own}
        for stream in (False, True):
            best: dict[str, float] = {}
            for _ in range(args.rounds):  # alternate clients so machine noise hits all alike
                for name, fn in clients.items():
                    elapsed = uvloop.run(fn(url, args.requests, stream))
                    best[name] = min(best.get(name, 1e9), elapsed)
            fastest = min(best.values())
            label = "16-chunk streaming" if stream else "non-streaming"
            print(f"\n{label}, sequential, {args.requests} requests (best of {args.rounds}):")
            for name, elapsed in best.items():
                print(
                    f"  {name:24s} {args.requests / elapsed:8.0f} req/s  {elapsed / args.requests * 1e6:7.1f} us/req"
                    f"  x{elapsed / fastest:.2f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
