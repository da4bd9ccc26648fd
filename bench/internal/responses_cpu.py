"""What `POST /v1/responses` costs the gateway's CPU next to chat completions, step
by step, in process: the HTTP figures (`make bench-overhead`, bench/responses_latency.py)
say how much more a Responses request takes; this says where.

    python -m bench.internal.responses_cpu [--n 20000] [--http 3000]

Steps, each timed over `--n` iterations for chat and for Responses, in alternating
batches, the fastest batch kept (the machine's other load only adds time):
- parse: the JSON body (already decoded) -> the generation request and the answer
  format (chat: `parse_chat` + `ChatAnswer`; Responses: its body reader, which also
  builds the response's shell and encoder);
- stream: 16 text deltas, the finish and the usage -> the server-sent-event bytes;
- whole: the same events -> the JSON body bytes.
With `--http N`, the whole gateway (its ASGI app, on this process's event loop, in
front of a fast upstream child process) answers N requests of each kind, and the
gateway's CPU time per request (`time.process_time`, so the upstream's share and
the waits are not counted; the fastest of 20 alternating rounds) is printed for
both, streamed and not.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from adapters.base import Event, Finish, TextDelta, Usage
from bench.procs import Server, python_module
from gateway.config.response_store import ResponseStoreConfig
from gateway.config.schema import GatewayConfig, QuotaStoreConfig
from gateway.http.request_io import new_request_id
from gateway.openai.answer_format import AnswerFormat, ChatAnswer
from gateway.openai.requests import parse_chat
from gateway.openai.responses.routes import ResponsesRoutes, build_response_store
from processes import free_port

MODEL = "m"
PROMPT = "Say hello to the benchmark."
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


def chat_body(stream: bool) -> dict[str, Any]:  # the bodies bench/responses_latency.py sends
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16, "stream": stream}


def responses_body(stream: bool) -> dict[str, Any]:
    return {"model": MODEL, "input": PROMPT, "max_output_tokens": 16, "stream": stream, "store": False}


def events(chunks: int = 16) -> list[Event]:
    """What the openai adapter yields for the fast upstream's answer."""
    out: list[Event] = [TextDelta(0, (" " if i else "") + WORDS[i % len(WORDS)]) for i in range(chunks)]
    return [*out, Finish(0, "stop"), Usage(7, chunks)]


def _run(coro: Any) -> Any:
    """Run a coroutine that never suspends (store: false awaits nothing) without a loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the coroutine suspended")


class Steps:
    def __init__(self) -> None:
        store = build_response_store(ResponseStoreConfig(kind="memory"), QuotaStoreConfig(kind="memory"))
        self.routes = ResponsesRoutes.__new__(ResponsesRoutes)
        self.routes.store = store

    def parse(self, chat: bool, stream: bool) -> AnswerFormat:
        if chat:
            first = parse_chat(chat_body(stream), new_request_id())
            return ChatAnswer(first, int(time.time()), 1, True)
        _, answer = _run(self.routes.parse(responses_body(stream), new_request_id(), ""))
        return answer

    def stream(self, chat: bool, evs: list[Event]) -> bytes:
        answer = self.parse(chat, True)
        out = [answer.stream_start()]
        for ev in evs:
            out.append(answer.stream_feed(ev))
        out.append(_run(answer.stream_end(evs[-1])))  # type: ignore[arg-type]
        return b"".join(out)

    def whole(self, chat: bool, evs: list[Event]) -> bytes:
        answer = self.parse(chat, False)
        for ev in evs:
            answer.whole_feed(ev)
        return orjson.dumps(_run(answer.whole_body(evs[-1])))  # type: ignore[arg-type]


def time_pair(chat: Callable[[], Any], responses: Callable[[], Any], n: int, batches: int = 20) -> tuple[float, float]:
    """Per-call µs of each, the fastest of `batches` alternating batches of n/batches
    calls: the other processes on a shared machine only ever add time, so the
    minimum is the part that is this code's."""
    best = [float("inf"), float("inf")]
    size = max(1, n // batches)
    for _ in range(batches):
        for side, fn in enumerate((chat, responses)):
            started = time.perf_counter_ns()
            for _ in range(size):
                fn()
            best[side] = min(best[side], (time.perf_counter_ns() - started) / size / 1000)
    return best[0], best[1]


def in_process(n: int) -> list[tuple[str, float, float]]:
    s, evs = Steps(), events()
    rows = []
    for name, chat_fn, resp_fn in (
        ("parse (non-stream body)", lambda: s.parse(True, False), lambda: s.parse(False, False)),
        ("parse + stream 16 chunks", lambda: s.stream(True, evs), lambda: s.stream(False, evs)),
        ("parse + whole answer", lambda: s.whole(True, evs), lambda: s.whole(False, evs)),
    ):
        rows.append((name, *time_pair(chat_fn, resp_fn, n)))
    return rows


# ---- the whole gateway, in process ---------------------------------------------------------


def gateway_config(upstream: str) -> GatewayConfig:
    from gateway.config.schema import parse_config

    return parse_config(
        {
            "listen": {"host": "127.0.0.1", "port": free_port()},
            "auth": {"mode": "none"},
            "quota_store": {"kind": "memory"},
            "access_log": False,
            "log_level": "warning",
            "models": {
                MODEL: {
                    "backends": [
                        {"name": "upstream", "adapter": "openai", "url": upstream + "/v1", "served_model": MODEL}
                    ]
                }
            },
        }
    )


async def _call(app: Any, path: str, body: bytes) -> bytes:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    sent = [False]
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    out: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 200:
            raise RuntimeError(f"{path} answered {message['status']}")
        if message["type"] == "http.response.body":
            out.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(out)


async def through_gateway(upstream: str, n: int) -> list[tuple[str, float, float]]:
    from gateway.app import Gateway, HotPath, create_app

    app = HotPath(create_app(Gateway(gateway_config(upstream))))
    await app.gateway.startup()
    rows = []
    try:
        for stream in (False, True):
            paths = {
                "chat": ("/v1/chat/completions", orjson.dumps(chat_body(stream))),
                "responses": ("/v1/responses", orjson.dumps(responses_body(stream))),
            }
            for path, body in paths.values():  # warm both (connections, caches)
                for _ in range(50):
                    await _call(app, path, body)
            cpu: dict[str, list[float]] = {"chat": [], "responses": []}
            for _ in range(20):  # alternating rounds: noise hits both alike
                for name, (path, body) in paths.items():
                    started = time.process_time_ns()
                    for _ in range(n // 20):
                        await _call(app, path, body)
                    cpu[name].append((time.process_time_ns() - started) / (n // 20) / 1000)
            label = "HTTP path, 16-chunk stream" if stream else "HTTP path, non-stream"
            rows.append((label, min(cpu["chat"]), min(cpu["responses"])))
    finally:
        await app.gateway.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.internal.responses_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20000, help="iterations per in-process step")
    p.add_argument("--http", type=int, default=0, help="requests per kind through the whole gateway (0: skip)")
    args = p.parse_args(argv)
    rows = in_process(args.n)
    if args.http:
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = python_module("simulators.openai_upstream", "--port", str(port), "--chunks", "16")
            with Server("upstream", cmd + ["--model-name", MODEL], url + "/health", Path(tmp)):
                rows += asyncio.run(through_gateway(url, args.http))
    print(f"{'step':32} {'chat µs':>9} {'responses µs':>13} {'extra µs':>9}")
    for name, chat_us, resp_us in rows:
        print(f"{name:32} {chat_us:9.1f} {resp_us:13.1f} {resp_us - chat_us:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
