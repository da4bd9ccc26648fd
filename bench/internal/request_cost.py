"""What one chat request costs the gateway in process, in two measures: its CPU time
(the fastest of alternating rounds; the machine's other load only adds to it) and
the Python function calls and bytecode instructions it runs, counted by a tracer.
The counts do not move with the machine's load, so on a busy machine they tell a
change to the request path from noise where requests/s cannot (docs/bench/request-path.md).

    python -m bench.internal.request_cost [--n 2000] [--count 200] [--stream] [--top 30]

The gateway's ASGI app runs on this process's event loop in front of a fast upstream
child process (bench/internal/responses_cpu.py's setup); run it from two checkouts to
compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bench.internal.responses_cpu import MODEL, _call, chat_body, gateway_config
from bench.procs import Server, python_module
from processes import free_port

PATH = "/v1/chat/completions"


class Counter:
    """Python calls and bytecode instructions per function while `on`."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.instructions: collections.Counter[str] = collections.Counter()

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        name = "/".join(code.co_filename.rsplit("/", 2)[-2:]) + ":" + code.co_qualname
        self.calls[name] += 1
        frame.f_trace_opcodes = True
        instructions = self.instructions

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                instructions[name] += 1
            return local

        return local

    def on(self) -> None:
        sys.settrace(self._trace)

    def off(self) -> None:
        sys.settrace(None)


async def measure(upstream: str, n: int, count: int, stream: bool) -> tuple[float, Counter]:
    from gateway.app import Gateway, HotPath, create_app

    app = HotPath(create_app(Gateway(gateway_config(upstream))))
    await app.gateway.startup()
    body = orjson.dumps(chat_body(stream))
    try:
        for _ in range(100):  # warm: connections, caches, the metrics' children
            await _call(app, PATH, body)
        rounds = []
        for _ in range(10):
            started = time.process_time_ns()
            for _ in range(n // 10):
                await _call(app, PATH, body)
            rounds.append((time.process_time_ns() - started) / (n // 10) / 1000)
        counter = Counter()
        counter.on()
        try:
            for _ in range(count):
                await _call(app, PATH, body)
        finally:
            counter.off()
    finally:
        await app.gateway.shutdown()
    return min(rounds), counter


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.internal.request_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2000, help="requests timed (10 rounds)")
    p.add_argument("--count", type=int, default=200, help="requests traced for the counts")
    p.add_argument("--stream", action="store_true", help="16-chunk streamed answers")
    p.add_argument("--top", type=int, default=30, help="functions listed, most instructions first")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = python_module("simulators.openai_upstream", "--port", str(port), "--chunks", "16")
        with Server("upstream", cmd + ["--model-name", MODEL], url + "/health", Path(tmp)):
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # the server's loop
                cpu_us, c = runner.run(measure(url, args.n, args.count, args.stream))
    per = args.count
    print(f"{'streamed' if args.stream else 'non-streamed'} chat, in process: {cpu_us:.0f} us CPU per request")
    print(f"{sum(c.instructions.values()) / per:,.0f} Python instructions, {sum(c.calls.values()) / per:,.1f} calls")
    for name, ops in c.instructions.most_common(args.top):
        print(f"{ops / per:9.1f} {c.calls[name] / per:6.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
