"""The gateway's own HTTP/1.1 client for the hot path: keep-alive pools on asyncio
protocols with httptools' response parser. It does only what an upstream call needs,
in a fraction of aiohttp's time (`python -m bench.client_choice`, docs/architecture.md).

Closing a response not read to its end closes its connection (how a runtime learns the
client left). Every wait is bounded, each by its own limit: a free connection
(`pool_wait`), the connect, the first byte, then the silence between two body chunks.
"""

from __future__ import annotations

import asyncio
import collections
from urllib.parse import urlsplit

import httptools

from adapters.http_slots import Slots

# Stop reading from the socket when this much body is buffered unread.
HIGH_WATER = 1 << 20
# How long a stream read to its last event may wait for its message end before its
# connection is closed rather than reused (a runtime sends it right after [DONE]).
FINISH_S = 1.0


class HTTPError(Exception):
    """Base of the client's errors."""


class ConnectError(HTTPError):
    """No connection could be made (refused, unreachable, connect timeout)."""


class PoolTimeout(HTTPError):
    """Every connection of the pool stayed in use for longer than the pool wait."""

    def __init__(self, message: str, waited_s: float) -> None:
        super().__init__(message)
        self.waited_s = waited_s

    @classmethod
    def full(cls, limit: int, where: str, waited_s: float) -> PoolTimeout:
        """The pool of `limit` connections to `where` (host:port) stayed full (http and https)."""
        return cls(f"all {limit} connections to {where} stayed in use for {waited_s:g} s", waited_s)


class ReadTimeout(HTTPError):
    """The server sent nothing for longer than allowed: before the first byte of
    the response (`first_byte` True) or between two chunks of its body. `limit_s`: the
    limit that ran out, as the request set it (not what was left of it when a wait began)."""

    def __init__(self, message: str, limit_s: float, first_byte: bool) -> None:
        super().__init__(message)
        self.limit_s = limit_s
        self.first_byte = first_byte


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
        # A stream read to its last event whose message end has not arrived yet: the
        # timer that gives up on it (see ConnectionPool._put_back_when_done).
        self.finishing: asyncio.TimerHandle | None = None
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
            assert self.transport is not None  # data only arrives after connection_made
            self.transport.close()
        self._wake()

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.finishing is not None:
            self.pool._finished(self)
        if not self.message_done and self.error is None:
            self.error = ConnectionClosed("the server closed the connection" + (f": {exc}" if exc else ""))
        self._wake()

    # ---- httptools callbacks -------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))  # lower-cased when read (the hot path never reads them)

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.finishing is not None:
            return  # what follows the last event of a stream nobody reads any more
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        self.message_done = True
        self.keep_alive = self.parser.should_keep_alive()
        if self.finishing is not None:
            self.pool._finished(self)

    # ---- waiting -----------------------------------------------------------------------

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self, timeout: float | None, first_byte: bool, limit: float | None = None) -> None:
        """Wait until something new happened (bytes, completion, close, error), at
        most `timeout` seconds (None: no limit); `first_byte` says which limit ran out,
        `limit` its size as set (default `timeout`), for the error."""
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        timer = (
            loop.call_later(max(timeout, 0.0), self._timeout, timeout if limit is None else limit, first_byte)
            if timeout is not None
            else None
        )
        try:
            await self.waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()
        if self.error is not None and not self.chunks:
            raise self.error

    def _timeout(self, limit: float, first_byte: bool) -> None:
        if self.error is None:
            what = "before the first byte" if first_byte else "between two chunks"
            self.error = ReadTimeout(
                f"{self.pool.host}:{self.pool.port} sent nothing {what} within the {limit:g} s limit", limit, first_byte
            )
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
    """One upstream response. Read it with `read()`, `iter_chunks()` or `iter_lines()`; then
    `release()` (fully read: the connection is reused) or `close()`.

    Until its first body bytes arrive, a read waits until the request's first-byte
    deadline; after them, at most the idle limit between two chunks."""

    def __init__(
        self,
        conn: _Connection,
        pool: ConnectionPool,
        deadline: float | None,
        idle_s: float | None,
        first_byte_s: float | None = None,
    ) -> None:
        self._conn = conn
        self._pool = pool
        self._deadline = deadline  # loop time by which the first body bytes must arrive
        self._first_byte_s = first_byte_s  # the limit that deadline comes from
        self._idle_s = idle_s
        self._got_body = False
        self.status = conn.status
        self._raw_headers = conn.headers  # its own list: a reused connection starts a new one
        self._done = False

    @property
    def headers(self) -> dict[str, str]:
        """The response's headers by lower-case name, decoded when asked (the hot path never asks)."""
        return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self._raw_headers}

    async def _wait(self) -> None:
        if self._got_body or self._deadline is None:
            await self._conn.wait(self._idle_s, first_byte=False)
        else:
            await self._conn.wait(
                self._deadline - asyncio.get_running_loop().time(), first_byte=True, limit=self._first_byte_s
            )

    def _take(self) -> bytes:
        self._got_body = True
        return self._conn.take()

    async def read(self) -> bytes:
        conn = self._conn
        parts = []
        while True:
            if conn.chunks:
                parts.append(self._take())
            if conn.message_done:
                break
            if conn.error is not None:
                raise conn.error
            await self._wait()
        self._done = True
        return b"".join(parts)

    async def iter_chunks(self):
        conn = self._conn
        while True:
            if conn.chunks:
                yield self._take()
                continue
            if conn.message_done:
                self._done = True
                return
            if conn.error is not None:
                raise conn.error
            await self._wait()

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
        """Done with a response read to its end. A stream's reader stops at its last
        event (`[DONE]`), usually a moment before the message end (the chunked
        terminator) arrives: the connection waits for it briefly, then is reused."""
        if self._done or self._conn.message_done:
            self._pool._put_back(self._conn)
        else:
            self._pool._put_back_when_done(self._conn)

    def close(self) -> None:
        self._pool._discard(self._conn)


class ConnectionPool:
    """Keep-alive connections to one host:port, at most `limit` at a time; a request
    waits at most `pool_wait` seconds for one of them to be free (None: no limit)."""

    def __init__(
        self,
        url: str,
        *,
        limit: int = 256,
        pool_wait: float | None = 5.0,
        connect_timeout: float = 5.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"the fast client speaks plain http only, not {parts.scheme!r}")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.host_header = parts.netloc.encode()
        self.limit = limit
        self.pool_wait = pool_wait
        self.connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._finishing: set[_Connection] = set()
        self._slots = Slots(limit)  # the `limit` connections' slots

    async def request(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        first_byte: float | None = None,
        idle: float | None = None,
    ) -> Response:
        """Send a request and return once the response's headers arrived. The headers
        and the first body bytes must arrive within `first_byte` seconds of sending,
        later body chunks at most `idle` seconds apart (None: no limit)."""
        fields = f"\r\nContent-Length: {len(body)}\r\n"
        for k, v in (headers or {}).items():
            fields += f"{k}: {v}\r\n"
        line = f"{method} {path} HTTP/1.1\r\nHost: ".encode()
        payload = b"".join((line, self.host_header, (fields + "\r\n").encode("latin-1"), body))
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            conn = await self._acquire()
            assert conn.transport is not None  # _acquire returns connected connections only
            conn.transport.write(payload)
            deadline = None if first_byte is None else loop.time() + first_byte
            try:
                while not conn.headers_done:
                    if conn.error is not None:
                        raise conn.error
                    await conn.wait(
                        None if deadline is None else deadline - loop.time(), first_byte=True, limit=first_byte
                    )
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
            return Response(conn, self, deadline, idle, first_byte)
        raise ConnectionClosed("unreachable")  # the loop always returns or raises

    async def _acquire(self) -> _Connection:
        """A connection for one request; it holds one of the `limit` slots until
        it is put back (idle connections hold none) or discarded."""
        slots = self._slots
        if slots.free > 0 and not slots.waiters:
            slots.free -= 1
        else:
            # Every connection is in use: wait for one, but not for ever (a wedged
            # backend must become an error, not a request that never answers).
            try:
                await slots.wait(self.pool_wait)
            except TimeoutError:
                raise PoolTimeout.full(self.limit, f"{self.host}:{self.port}", self.pool_wait or 0.0) from None
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                conn.reused = True
                conn._reset()
                conn.active = True
                return conn
            if conn.transport is not None:
                conn.transport.close()
        loop = asyncio.get_running_loop()
        try:
            # not asyncio.wait_for: on 3.11 it drops a cancel that lands as the connection opens,
            # and a request its client left (or a drain cut) would be sent all the same
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(lambda: _Connection(self), self.host, self.port)
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
            slots = self._slots
            if slots.waiters:
                slots.release()
            else:
                slots.free += 1

    def _put_back(self, conn: _Connection) -> None:
        if conn.closed or not conn.keep_alive or not conn.message_done:
            self._discard(conn)
            return
        self._deactivate(conn)
        self._idle.append(conn)

    def _put_back_when_done(self, conn: _Connection) -> None:
        """Keep `conn` (and its slot) until its message ends, at most FINISH_S, then
        put it back; closed instead if it does not end in time or the server closes it."""
        if conn.closed or conn.error is not None:
            self._discard(conn)
            return
        conn.chunks.clear()
        conn.buffered = 0
        if conn.paused and conn.transport is not None:
            conn.paused = False
            conn.transport.resume_reading()
        conn.finishing = asyncio.get_running_loop().call_later(FINISH_S, self._finished, conn)
        self._finishing.add(conn)

    def _finished(self, conn: _Connection) -> None:
        """The message of a finishing connection ended, it closed, or time ran out."""
        timer, conn.finishing = conn.finishing, None
        if timer is not None:
            timer.cancel()
        self._finishing.discard(conn)
        self._put_back(conn)  # discards it unless the message ended on a keep-alive connection

    def _discard(self, conn: _Connection) -> None:
        if conn in self._idle:
            self._idle.remove(conn)
        self._deactivate(conn)
        if conn.transport is not None:
            conn.transport.close()

    def close(self) -> None:
        for conn in list(self._finishing):
            if conn.finishing is not None:
                conn.finishing.cancel()
                conn.finishing = None
            self._discard(conn)
        self._finishing.clear()
        for conn in list(self._idle):
            self._discard(conn)
