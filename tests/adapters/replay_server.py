"""A byte-exact HTTP replay server for adapter tests (run as its own process).

The adapters must survive what the runtimes really put on the wire (a trailing
space after a frame, a stream cut without its last chunk, plain-text error bodies).
An HTTP framework would tidy those away, so this speaks HTTP/1.1 over raw asyncio
streams and writes exactly the recorded bytes.

Control endpoints:
- `POST /_replay/script` `{"routes": {"POST /v1/chat/completions": [response, ...]}}`
  replaces the script and clears the records. A route's responses are used in
  order; the last one repeats. A response is `{"status", "headers"?, "body"}` or,
  for a stream, `{"status", "frames": [str, ...], "cut": bool, "hold_ms": int}`:
  `cut` drops the connection instead of ending the chunked body; `hold_ms`
  waits before ending so a client can disconnect first.
- `GET /_replay/requests`: `{"requests": [{"method", "path", "headers", "body"}],
  "disconnects": N}` where N counts streams the client left during `hold_ms`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    422: "Unprocessable Entity",
    424: "Failed Dependency",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Replay:
    def __init__(self) -> None:
        self.routes: dict[str, list[dict[str, Any]]] = {}
        self.used: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []
        self.disconnects = 0

    def next_response(self, key: str) -> dict[str, Any] | None:
        responses = self.routes.get(key)
        if not responses:
            return None
        i = self.used.get(key, 0)
        self.used[key] = i + 1
        return responses[min(i, len(responses) - 1)]


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
    return method, target, headers, body


def head_bytes(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def handle(replay: Replay, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            request = await read_request(reader)
            if request is None:
                return
            method, target, headers, body = request
            path = target.split("?", 1)[0]
            if path == "/_replay/script":
                data = json.loads(body)
                replay.__init__()
                replay.routes = data.get("routes", {})
                await respond(writer, 200, {"content-type": "application/json"}, b"{}")
                continue
            if path == "/_replay/requests":
                payload = json.dumps({"requests": replay.requests, "disconnects": replay.disconnects}).encode()
                await respond(writer, 200, {"content-type": "application/json"}, payload)
                continue
            try:
                parsed: Any = json.loads(body) if body else None
            except ValueError:
                parsed = body.decode(errors="replace")
            replay.requests.append({"method": method, "path": target, "headers": headers, "body": parsed})
            response = replay.next_response(f"{method} {path}")
            if response is None:
                await respond(writer, 404, {"content-type": "text/plain"}, b"no such route in the script")
                continue
            if "frames" not in response:
                hdrs = {"content-type": "application/json", **response.get("headers", {})}
                await respond(writer, response.get("status", 200), hdrs, response.get("body", "").encode())
                continue
            if not await stream(replay, reader, writer, response):
                return
    finally:
        writer.close()


async def respond(writer: asyncio.StreamWriter, status: int, headers: dict[str, str], body: bytes) -> None:
    writer.write(head_bytes(status, {**headers, "content-length": str(len(body))}) + body)
    await writer.drain()


async def stream(
    replay: Replay, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: dict[str, Any]
) -> bool:
    """Write a chunked SSE body; False when the connection is finished."""
    headers = {"content-type": "text/event-stream", "transfer-encoding": "chunked", **response.get("headers", {})}
    writer.write(head_bytes(response.get("status", 200), headers))
    for frame in response["frames"]:
        data = frame.encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
    hold = response.get("hold_ms", 0) / 1000
    if hold:
        try:
            left = await asyncio.wait_for(reader.read(1), timeout=hold)
        except TimeoutError:
            left = None
        if left == b"":
            replay.disconnects += 1
            return False
    if response.get("cut"):
        writer.transport.abort()
        return False
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


async def main(port: int) -> None:
    replay = Replay()
    server = await asyncio.start_server(lambda r, w: handle(replay, r, w), "127.0.0.1", port)
    print("REPLAY READY", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(main(parser.parse_args().port))
