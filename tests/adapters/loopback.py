"""In-process HTTP servers on loopback, scripted per connection, for the client and
transport tests: the order of a server's writes and the client's timers is then the
event loop's, not the machine's load."""

from __future__ import annotations

import asyncio
import contextlib

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@contextlib.asynccontextmanager
async def serve(handle, host: str = "127.0.0.1"):
    """Run `handle(reader, writer, n)` for the n-th accepted connection (from 0);
    yields (port, the accepted connections so far)."""
    accepted: list[asyncio.StreamWriter] = []
    tasks: list[asyncio.Task] = []

    async def on_connect(reader, writer):
        accepted.append(writer)
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await handle(reader, writer, len(accepted) - 1)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a client leaving, or the test ending
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, host, 0)
    try:
        yield server.sockets[0].getsockname()[1], accepted
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def forever(*_):
    await asyncio.sleep(3600)


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and its Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length) if length else b""
