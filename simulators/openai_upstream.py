"""A fast, scriptable OpenAI-compatible upstream for tests and the overhead benchmark.

It is a plain ASGI app (no framework) so that it costs as little CPU as possible:
the overhead benchmark compares calling it directly with calling it through the
gateway, and a slow upstream would hide the gateway's cost.

Behaviour per request can be scripted with an extra body field `sim` (the gateway
passes unknown fields through), for example:
  {"sim": {"ttft_ms": 50, "itl_ms": 20, "chunks": 8, "status": 503,
           "fail_after": 3, "cut_after": 3, "no_done": true, "tool_call": true}}
- chunks: output tokens (one word each); default `--chunks`, capped by max_tokens
- status: answer with this HTTP status and an OpenAI error body
- fail_after: after K content chunks send an in-stream error event (then [DONE])
- cut_after: after K content chunks drop the connection without [DONE]
- no_done: end the stream without `data: [DONE]`
- tool_call: answer with a tool call to the first tool (also when tool_choice
  is "required" or names a function)

`POST /v1/embeddings` answers in OpenAI's shape (simulators/embeddings.py).
`GET /_sim/stats` reports in-flight, max concurrency seen, completed, aborted
(client went away before the end) and the last request body; `POST /_sim/reset`
clears them.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import orjson

from simulators.embeddings import openai_embeddings

WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
)


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.inflight = 0
        self.max_inflight = 0
        self.total = 0
        self.completed = 0
        self.aborted = 0
        self.last_body: Any = None
        self.bodies: list[Any] = []

    def as_dict(self) -> dict:
        return {**vars(self), "bodies": self.bodies[-50:]}


def _prompt_tokens(body: dict) -> int:
    # A deterministic stand-in for a tokenizer: one token per whitespace word.
    if "messages" in body:
        words = 0
        for m in body.get("messages") or []:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str):
                words += len(c.split())
        return words + 3 * len(body.get("messages") or [])
    p = body.get("prompt")
    if isinstance(p, str):
        return len(p.split())
    if isinstance(p, list):
        return len(p)
    return 0


class Upstream:
    def __init__(self, chunks: int = 16, model: str = "m", ttft_ms: float = 0.0, itl_ms: float = 0.0) -> None:
        self.chunks = chunks
        self.model = model
        self.ttft_ms = ttft_ms
        self.itl_ms = itl_ms
        self.stats = Stats()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path, method = scope["path"], scope["method"]
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            body = await _read_body(receive)
            await self._generate(path.endswith("chat/completions"), body, receive, send)
        elif method == "POST" and path == "/v1/embeddings":
            await _json(send, *openai_embeddings(await _read_body(receive), self.model, self.stats))
        elif path == "/v1/models":
            await _json(
                send,
                200,
                {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "sim"}]},
            )
        elif path in ("/health", "/healthz"):
            await _json(send, 200, {"status": "ok"})
        elif path == "/_sim/stats":
            await _json(send, 200, self.stats.as_dict())
        elif path == "/_sim/reset" and method == "POST":
            self.stats.reset()
            await _json(send, 200, {"ok": True})
        else:
            await _json(
                send, 404, {"error": {"message": f"no route {path}", "type": "not_found", "param": None, "code": None}}
            )

    async def _generate(self, chat: bool, raw: bytes, receive, send) -> None:
        st = self.stats
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            await _json(
                send,
                400,
                {"error": {"message": "bad json", "type": "invalid_request_error", "param": None, "code": None}},
            )
            return
        st.total += 1
        st.last_body = body
        st.bodies.append(body)
        if len(st.bodies) > 200:
            del st.bodies[:100]
        st.inflight += 1
        st.max_inflight = max(st.max_inflight, st.inflight)
        gone = asyncio.Event()
        watcher = asyncio.create_task(_watch_disconnect(receive, gone))
        finished = False
        try:
            finished = await self._answer(chat, body, send, gone)
        finally:
            watcher.cancel()
            st.inflight -= 1
            if finished:
                st.completed += 1
            else:
                st.aborted += 1

    async def _answer(self, chat: bool, body: dict, send, gone: asyncio.Event) -> bool:
        sim = body.get("sim") or {}
        status = sim.get("status")
        ttft = float(sim.get("ttft_ms", self.ttft_ms)) / 1000
        itl = float(sim.get("itl_ms", self.itl_ms)) / 1000
        if status:
            if ttft and await _sleep_or_gone(ttft, gone):
                return False
            await _json(
                send,
                int(status),
                {"error": {"message": f"simulated {status}", "type": "server_error", "param": None, "code": None}},
            )
            return True
        n = int(body.get("n") or 1)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        count = int(sim.get("chunks", self.chunks))
        finish = "stop"
        if max_tokens is not None and int(max_tokens) < count:
            count, finish = int(max_tokens), "length"
        tools = body.get("tools") or []
        tc = body.get("tool_choice")
        want_tool = bool(tools) and tc != "none" and (sim.get("tool_call") or tc == "required" or isinstance(tc, dict))
        tool_name = None
        if want_tool:
            tool_name = tc["function"]["name"] if isinstance(tc, dict) else tools[0]["function"]["name"]
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16]
        created = int(time.time())
        model = body.get("model") or self.model
        prompt_tokens = _prompt_tokens(body)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": count * n,
            "total_tokens": prompt_tokens + count * n,
        }
        if ttft and await _sleep_or_gone(ttft, gone):
            return False
        if not body.get("stream"):
            return await self._answer_json(
                chat, rid, created, model, n, count, finish, tool_name, usage, itl, send, gone
            )
        return await self._answer_stream(
            chat, body, sim, rid, created, model, n, count, finish, tool_name, usage, itl, send, gone
        )

    async def _answer_json(
        self, chat, rid, created, model, n, count, finish, tool_name, usage, itl, send, gone
    ) -> bool:
        if itl and await _sleep_or_gone(itl * count, gone):
            return False
        text = " ".join(WORDS[i % len(WORDS)] for i in range(count))
        choices = []
        for i in range(n):
            if chat:
                msg: dict[str, Any] = {"role": "assistant", "content": text}
                fr = finish
                if tool_name:
                    msg = {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"call_{i}",
                                "type": "function",
                                "function": {"name": tool_name, "arguments": '{"city": "Paris"}'},
                            }
                        ],
                    }
                    fr = "tool_calls"
                choices.append({"index": i, "message": msg, "logprobs": None, "finish_reason": fr})
            else:
                choices.append({"index": i, "text": text, "logprobs": None, "finish_reason": finish})
        await _json(
            send,
            200,
            {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": model,
                "choices": choices,
                "usage": usage,
            },
        )
        return True

    async def _answer_stream(
        self, chat, body, sim, rid, created, model, n, count, finish, tool_name, usage, itl, send, gone
    ) -> bool:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
            }
        )
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": rid, "object": obj, "created": created, "model": model}
        fail_after = sim.get("fail_after")
        cut_after = sim.get("cut_after")

        async def emit(payload: dict) -> None:
            await send(
                {"type": "http.response.body", "body": b"data: " + orjson.dumps(payload) + b"\n\n", "more_body": True}
            )

        if chat:
            for i in range(n):
                await emit(
                    {
                        **head,
                        "choices": [
                            {
                                "index": i,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                    }
                )
        if tool_name:
            for i in range(n):
                await emit(
                    {
                        **head,
                        "choices": [
                            {
                                "index": i,
                                "delta": {
                                    "tool_calls": [
                                        {
                                            "index": 0,
                                            "id": f"call_{i}",
                                            "type": "function",
                                            "function": {"name": tool_name, "arguments": ""},
                                        }
                                    ]
                                },
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                    }
                )
                for piece in ('{"city": ', '"Paris"}'):
                    await emit(
                        {
                            **head,
                            "choices": [
                                {
                                    "index": i,
                                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]},
                                    "logprobs": None,
                                    "finish_reason": None,
                                }
                            ],
                        }
                    )
            finish = "tool_calls"
            count = 0
        for k in range(count):
            if gone.is_set():
                return False
            if itl and await _sleep_or_gone(itl, gone):
                return False
            if fail_after is not None and k == int(fail_after):
                await emit(
                    {
                        "error": {
                            "message": "simulated engine failure",
                            "type": "server_error",
                            "param": None,
                            "code": None,
                        }
                    }
                )
                await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
                return True
            if cut_after is not None and k == int(cut_after):
                raise ConnectionAbortedError("simulated cut")  # uvicorn closes the socket without a terminator
            word = WORDS[k % len(WORDS)] + (" " if k < count - 1 else "")
            for i in range(n):
                if chat:
                    ch = {"index": i, "delta": {"content": word}, "logprobs": None, "finish_reason": None}
                else:
                    ch = {"index": i, "text": word, "logprobs": None, "finish_reason": None}
                await emit({**head, "choices": [ch]})
        for i in range(n):
            if chat:
                ch = {"index": i, "delta": {}, "logprobs": None, "finish_reason": finish}
            else:
                ch = {"index": i, "text": "", "logprobs": None, "finish_reason": finish}
            await emit({**head, "choices": [ch]})
        so = body.get("stream_options") or {}
        if so.get("include_usage"):
            await emit({**head, "choices": [], "usage": usage})
        if sim.get("no_done"):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return True
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        return not gone.is_set()


async def _read_body(receive) -> bytes:
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(chunks)


async def _watch_disconnect(receive, gone: asyncio.Event) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            gone.set()
            return


async def _sleep_or_gone(seconds: float, gone: asyncio.Event) -> bool:
    """Sleep, but return True at once if the client went away."""
    try:
        async with asyncio.timeout(seconds):
            await gone.wait()
        return True
    except TimeoutError:
        return False


async def _json(send, status: int, payload: dict) -> None:
    data = orjson.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9000)
    p.add_argument("--model-name", default="m")
    p.add_argument("--chunks", type=int, default=16, help="output tokens per choice")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=0.0)


def add_simulate_parser(sub) -> None:
    """`switchyard simulate openai` (picked up by simulators/cli.py)."""
    p = sub.add_parser("openai", help="a fast, scriptable OpenAI-compatible upstream")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    app = Upstream(chunks=args.chunks, model=args.model_name, ttft_ms=args.ttft_ms, itl_ms=args.itl_ms)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        http="httptools",
        loop="uvloop",
        lifespan="on",
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="fast OpenAI-compatible test upstream")
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
