"""How an HTTP adapter reaches its backend: one per backend, whatever the runtime.

POSTs on the hot path go through the keep-alive pool of the fast client
(adapters/http_client.py) for http and through aiohttp for https; the cold paths
(health, load, models, abort calls) use aiohttp. Each wait has its own bound
(docs/adapters.md, "Timeouts"), and every failure becomes the gateway's error, which
names the backend only in the log. Closing a response not read to its end closes its
connection: that is how a runtime learns the client left. The runtime's own abort
calls run in tasks of their own, awaited at `aclose`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from adapters.dialect import Call
from adapters.errors import GatewayError, upstream_busy, upstream_failed, upstream_timeout, upstream_unavailable
from adapters.http_client import ConnectionPool, HTTPError, PoolTimeout, ReadTimeout
from adapters.http_slots import Slots

log = logging.getLogger(__name__)

# What a body read can raise: the fast client's errors (ReadTimeout among them) and aiohttp's.
READ_ERRORS = (TimeoutError, HTTPError, aiohttp.ClientError)
ABORT_TIMEOUT_S = 2.0


class Transport:
    def __init__(
        self,
        backend: str,
        url: str,
        *,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 5.0,
        first_byte_timeout_s: float = 60.0,
        stream_idle_timeout_s: float = 30.0,
        pool_wait_s: float = 5.0,
        max_connections: int = 256,
    ) -> None:
        self.backend = backend
        self.base_url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.first_byte_timeout_s = first_byte_timeout_s
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self._connect = (pool_wait_s + connect_timeout_s, connect_timeout_s)
        self._max_connections = max_connections
        parts = urlsplit(self.base_url)
        self._root = parts.path.rstrip("/")
        # https POSTs hold one of these from the request until release/close, as the fast
        # client's pool does for http: a full pool is the same `backend_busy` either way.
        self._slots = Slots(max_connections)
        self._pool_wait_s = pool_wait_s
        self._where = parts.netloc
        self._pool = (
            ConnectionPool(
                self.base_url, limit=max_connections, pool_wait=pool_wait_s, connect_timeout=connect_timeout_s
            )
            if parts.scheme == "http"
            else None
        )
        self._session: aiohttp.ClientSession | None = None
        self._aborts: set[asyncio.Task[None]] = set()
        self._abort_refusal_logged = False

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections, ttl_dns_cache=300, enable_cleanup_closed=True
                ),
                json_serialize=lambda o: orjson.dumps(o).decode(),
                auto_decompress=False,
            )
        return self._session

    def _timeout(self, read_s: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=None, connect=self._connect[0], sock_connect=self._connect[1], sock_read=read_s
        )

    async def open(self, path: str, body: bytes, headers: dict[str, str], *, stream: bool) -> Any:
        """POST and return the response once its head arrived (`status`, `read()`,
        `iter_chunks()`, then `release()` when read to its end, else `close()`). A stream's
        first byte and the silence between its chunks have their limits, a whole answer
        `timeout_s`; a failure to get an answer at all raises (may fail over)."""
        first_byte = self.first_byte_timeout_s if stream else self.timeout_s
        idle = self.stream_idle_timeout_s if stream else self.timeout_s
        try:
            if self._pool is not None:
                return await self._pool.request(
                    "POST", self._root + path, body, headers, first_byte=first_byte, idle=idle
                )
            try:
                await self._slots.take(self._pool_wait_s)
            except TimeoutError:
                raise PoolTimeout.full(self._max_connections, self._where, self._pool_wait_s) from None
            try:
                # aiohttp has one read limit per request: a stream's first-byte limit.
                resp = await self.session.post(
                    self.base_url + path, data=body, headers=headers, timeout=self._timeout(max(first_byte, idle))
                )
            except BaseException:
                self._slots.release()
                raise
            return _AiohttpResponse(resp, self._slots)
        except PoolTimeout as exc:
            raise upstream_busy(self.backend, str(exc), exc.waited_s) from None
        except ReadTimeout as exc:
            raise upstream_timeout(self.backend, str(exc), exc.limit_s, first_byte=True) from None
        except aiohttp.ConnectionTimeoutError as exc:
            # https: no connection within connect_timeout_s is unavailable, as on http (the
            # fast client's ConnectError below), not a timeout of an answer (a TimeoutError too).
            raise upstream_unavailable(self.backend, str(exc) or "connect timed out") from None
        except TimeoutError as exc:
            raise upstream_timeout(self.backend, str(exc) or "timeout", first_byte, first_byte=True) from None
        except (HTTPError, aiohttp.ClientConnectionError, OSError) as exc:
            raise upstream_unavailable(self.backend, str(exc) or type(exc).__name__) from None

    async def read(self, resp: Any) -> bytes:
        try:
            return await resp.read()
        except READ_ERRORS as exc:
            raise self.failure(exc, stream=False) from None

    def failure(self, exc: BaseException, *, stream: bool) -> GatewayError:
        """A read that broke off (one of READ_ERRORS) as the gateway's error."""
        if isinstance(exc, ReadTimeout):
            return upstream_timeout(self.backend, str(exc), exc.limit_s, exc.first_byte)
        if isinstance(exc, TimeoutError):  # aiohttp (https): its one read limit ran out
            limit = max(self.first_byte_timeout_s, self.stream_idle_timeout_s) if stream else self.timeout_s
            return upstream_timeout(self.backend, str(exc) or "timeout", limit, first_byte=False)
        what = "the stream" if stream else "its answer"
        return upstream_failed(self.backend, f"it cut {what} short", internal=str(exc) or type(exc).__name__)

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        """GET on a cold path; connection errors propagate."""
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self.session.get(self.base_url + path, timeout=timeout) as resp:
            return resp.status, await resp.read()

    def abort(self, calls: list[Call], headers: Mapping[str, str], hint: str) -> None:
        """Send the runtime's abort calls from a task of its own: the caller is usually
        being cancelled (the client went away), and a cancelled scope would cancel them too."""
        task = asyncio.get_running_loop().create_task(self._abort(calls, {**headers}, hint))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    async def _abort(self, calls: list[Call], headers: dict[str, str], hint: str) -> None:
        headers["content-type"] = "application/json"
        timeout = aiohttp.ClientTimeout(total=ABORT_TIMEOUT_S)
        for call in calls:
            try:
                async with self.session.post(
                    self.base_url + call.path, data=orjson.dumps(call.body), headers=headers, timeout=timeout
                ) as resp:
                    await resp.read()
                    status = resp.status
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                # The closed connection still stops the work, only later.
                log.debug("abort %s on backend %s failed: %s", call, self.backend, exc)
                continue
            if status != 200 and not self._abort_refusal_logged:
                self._abort_refusal_logged = True
                log.warning("backend %s answered HTTP %d to %s: %s", self.backend, status, call.path, hint)

    async def aclose(self) -> None:
        if self._aborts:
            await asyncio.wait(set(self._aborts), timeout=ABORT_TIMEOUT_S + 0.5)
        if self._pool is not None:
            self._pool.close()
        if self._session is not None:
            await self._session.close()
            self._session = None


class _AiohttpResponse:
    """An aiohttp response behind the fast client's Response interface (https); it holds
    one of its transport's slots until released or closed."""

    def __init__(self, resp: aiohttp.ClientResponse, slots: Slots) -> None:
        self._resp = resp
        self.status = resp.status
        self._slots: Slots | None = slots

    async def read(self) -> bytes:
        return await self._resp.read()

    def iter_chunks(self):
        return self._resp.content.iter_any()

    def release(self) -> None:
        self._resp.release()
        self._free()

    def close(self) -> None:
        self._resp.close()
        self._free()

    def _free(self) -> None:
        if self._slots is not None:
            self._slots.release()
            self._slots = None
