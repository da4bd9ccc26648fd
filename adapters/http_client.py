"""A small HTTP/1.1 client for the gateway's hot path: keep-alive connection pools
on asyncio protocols with httptools' response parser.

Why not aiohttp or httpx here: the gateway makes one upstream request per client
request, and the client library's per-request cost is most of the gateway's own
overhead. `python -m bench.client_choice` measures the three side by side; this
one does a request in a fraction of aiohttp's time because it does only what an
upstream call needs: one request line, a few headers, a body of known length,
and a response read as it arrives (chunked or not). aiohttp remains in use for
the cold paths (health, metrics, abort calls).

Closing a response that has not been read to its end closes its connection,
which is how the runtime learns that the client went away.
"""

from __future__ import annotations

import asyncio
import collections
from urllib.parse import urlsplit

import httptools

# Stop reading from the socket when this much body is buffered unread.
HIGH_WATER = 1 << 20


class HTTPError(Exception):
    """Base of the client's errors."""


class ConnectError(HTTPError):
    """No connection could be made (refused, unreachable, connect timeout)."""


class ReadTimeout(HTTPError):
    """The server sent nothing for longer than the read timeout."""


class ConnectionClosed(HTTPError):
    """The server closed the connection before the response was complete."""


class _Connection(asyncio.Protocol):
    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self.active = False  # holds one of the pool's slots
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.message_done = False
        self.keep_alive = False
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.got_bytes = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future | None = None
        self.paused = False

    # ---- asyncio.Protocol --------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = ConnectionClosed(f"invalid HTTP response: {exc}")
            self.transport.close()
        self._wake()

    def connection_lost(self, exc) -> None:
        self.closed = True
        if not self.message_done and self.error is None:
            self.error = ConnectionClosed("the server closed the connection" + (f": {exc}" if exc else ""))
        self._wake()

    # ---- httptools callbacks -------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        self.message_done = True
        self.keep_alive = self.parser.should_keep_alive()

    # ---- waiting -----------------------------------------------------------------------

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Wait until something new happened (bytes, completion, close, error)."""
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        timer = loop.call_later(timeout, self._timeout) if timeout else None
        try:
            await self.waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()
        if self.error is not None and not self.chunks:
            raise self.error

    def _timeout(self) -> None:
        if self.error is None:
            self.error = ReadTimeout(f"no data from the server for {self.pool.read_timeout:g} s")
        self._wake()

    def take(self) -> bytes:
        data = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()
        return data


class Response:
    """One upstream response. Read it with `read()` or `iter_lines()`; then
    `release()` (fully read: the connection is reused) or `close()`."""

    def __init__(self, conn: _Connection, pool: ConnectionPool) -> None:
        self._conn = conn
        self._pool = pool
        self.status = conn.status
        self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in conn.headers}
        self._done = False

    async def read(self) -> bytes:
        conn = self._conn
        parts = []
        while True:
            if conn.chunks:
                parts.append(conn.take())
            if conn.message_done:
                break
            if conn.error is not None:
                raise conn.error
            await conn.wait(self._pool.read_timeout)
        self._done = True
        return b"".join(parts)

    async def iter_chunks(self):
        conn = self._conn
        while True:
            if conn.chunks:
                yield conn.take()
                continue
            if conn.message_done:
                self._done = True
                return
            if conn.error is not None:
                raise conn.error
            await conn.wait(self._pool.read_timeout)

    async def iter_lines(self):
        """Body lines, each ending in its newline (the last may lack one)."""
        tail = b""
        async for chunk in self.iter_chunks():
            data = tail + chunk if tail else chunk
            start = 0
            while True:
                nl = data.find(b"\n", start)
                if nl < 0:
                    break
                yield data[start : nl + 1]
                start = nl + 1
            tail = data[start:]
        if tail:
            yield tail

    def release(self) -> None:
        if self._done:
            self._pool._put_back(self._conn)
        else:
            self.close()

    def close(self) -> None:
        self._pool._discard(self._conn)


class ConnectionPool:
    """Keep-alive connections to one host:port, at most `limit` at a time."""

    def __init__(
        self, url: str, *, limit: int = 256, connect_timeout: float = 5.0, read_timeout: float | None = 600.0
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"the fast client speaks plain http only, not {parts.scheme!r}")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.host_header = parts.netloc.encode()
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None

    async def request(self, method: str, path: str, body: bytes, headers: dict[str, str] | None = None) -> Response:
        """Send a request and return once the response's headers arrived."""
        head = [
            f"{method} {path} HTTP/1.1\r\nHost: ".encode(),
            self.host_header,
            b"\r\nContent-Length: ",
            str(len(body)).encode(),
            b"\r\n",
        ]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}\r\n".encode("latin-1"))
        head.append(b"\r\n")
        payload = b"".join(head) + body
        for attempt in range(2):
            conn = await self._acquire()
            conn.transport.write(payload)
            try:
                while not conn.headers_done:
                    if conn.error is not None:
                        raise conn.error
                    await conn.wait(self.read_timeout)
            except ConnectionClosed:
                self._discard(conn)
                # A reused keep-alive connection the server had already closed:
                # nothing was processed, so one retry on a fresh connection is safe.
                if conn.reused and not conn.got_bytes and attempt == 0:
                    continue
                raise
            except BaseException:
                self._discard(conn)
                raise
            return Response(conn, self)
        raise ConnectionClosed("unreachable")  # the loop always returns or raises

    async def _acquire(self) -> _Connection:
        """A connection for one request; it holds one of the `limit` slots until
        it is put back (idle connections hold none) or discarded."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        await self._slots.acquire()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                conn.reused = True
                conn._reset()
                conn.active = True
                return conn
            conn.transport.close()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port), timeout=self.connect_timeout
            )
        except TimeoutError:
            self._slots.release()
            raise ConnectError(
                f"connect to {self.host}:{self.port} timed out after {self.connect_timeout:g} s"
            ) from None
        except OSError as exc:
            self._slots.release()
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
        except BaseException:
            self._slots.release()
            raise
        conn.active = True
        return conn

    def _deactivate(self, conn: _Connection) -> None:
        if conn.active:
            conn.active = False
            self._slots.release()  # type: ignore[union-attr]

    def _put_back(self, conn: _Connection) -> None:
        if conn.closed or not conn.keep_alive or not conn.message_done:
            self._discard(conn)
            return
        self._deactivate(conn)
        self._idle.append(conn)

    def _discard(self, conn: _Connection) -> None:
        if conn in self._idle:
            self._idle.remove(conn)
        self._deactivate(conn)
        if conn.transport is not None:
            conn.transport.close()

    def close(self) -> None:
        for conn in list(self._idle):
            self._discard(conn)
