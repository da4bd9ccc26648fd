"""Limits on what a connection may make the gateway hold before a request exists
(README.md, `limits`): a head over `max_head_bytes` or `max_headers` (431), not
complete within `head_timeout_s` (408), no request within `keepalive_timeout_s`
(closed), more than `max_pipelined` queued (not read). uvicorn's httptools protocol
has none but the keep-alive timeout; `limited_protocol` returns its subclass that
checks on each read and when a head completes, before the application sees anything.
The parser hands a header over only once it is complete, so an open head's reads are
counted too, in C per read (nothing per header): a connection can make us hold the
limit plus about two reads. A refusal while a response is being written closes the
connection rather than interleave an answer with it.
"""

from __future__ import annotations

import asyncio
import http
from dataclasses import dataclass

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from adapters.errors import GatewayError


@dataclass(frozen=True, slots=True)
class HeadLimits:
    max_head_bytes: int = 64 * 1024
    max_headers: int = 100
    head_timeout_s: float = 10.0
    keepalive_timeout_s: float = 30.0
    max_pipelined: int = 16


LINGER_S = 2.0  # how long a refused connection's further bytes (up to max_head_bytes) are read and dropped


class _Refused(Exception):
    """Raised inside a parser callback to stop parsing; `status` None closes without an answer."""

    def __init__(self, status: int | None, message: str = "", code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def limited_protocol(limits: HeadLimits) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn's `http=` setting, with `limits` bound."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits = HeadLimits()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn types it int; call_later takes the float (tests use sub-second limits).
        self.timeout_keep_alive = self.limits.keepalive_timeout_s  # type: ignore[assignment]
        self._head_open = False  # a request's first byte arrived, its headers did not end yet
        self._read_len = 0  # the read being parsed
        # Counted from raw reads (in C), not per header: a callback per header would
        # cost every request. Reads that held only the open head, and their lines:
        self._head_read = 0
        self._head_lines = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._idle_deadline = 0.0
        self._refused = False
        self._dropped = 0  # bytes read and dropped after a refusal

    # ---- connection ---------------------------------------------------------------

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._idle_deadline = self.loop.time() + self.timeout_keep_alive
        self.timeout_keep_alive_task = self.loop.call_at(self._idle_deadline, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            # Lingering after a refusal: dropped, and only so much of it.
            self._dropped += len(data)
            if self._dropped > self.limits.max_head_bytes:
                self.transport.close()
            return
        if self.timeout_keep_alive_task is not None:
            # Reads that start no request (blank lines) must not extend the idle time.
            self._idle_deadline = self.timeout_keep_alive_task.when()
        self._unset_keepalive_if_required()
        head_was_open = self._head_open
        cycle_before = self.cycle
        body_pending = cycle_before is not None and cycle_before.more_body
        self._read_len = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Refused):
                self._refuse(exc.__context__)
            else:
                self._invalid()
            return
        except httptools.HttpParserError:
            self._invalid()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._head_open:
            if head_was_open or (self.cycle is cycle_before and not body_pending):
                # No other request's bytes were in this read: all of it is this head's
                # (but blank lines before it).
                self._head_read += len(data)
                self._head_lines += data.count(b"\n")
            refusal = self._open_head_refusal()
            if refusal is not None:
                self._refuse(refusal)
            elif self._head_timer is None:
                # A head that came whole in one read needs no timer: most never do.
                self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)
        elif self.timeout_keep_alive_task is None and self._idle():
            self.timeout_keep_alive_task = self.loop.call_at(self._idle_deadline, self.timeout_keep_alive_handler)

    # ---- parser callbacks ---------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open = True
        self._head_read = self._head_lines = 0

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._cancel_head_timer()
        if len(self.headers) > self.limits.max_headers:
            raise self._too_many_headers()
        # The head is at most the reads it spans; only a large one is measured.
        if self._head_read + self._read_len > self.limits.max_head_bytes and self._parsed_head_bytes() > (
            self.limits.max_head_bytes
        ):
            raise self._head_too_large()
        if len(self.pipeline) >= self.limits.max_pipelined:
            raise _Refused(None)
        super().on_headers_complete()

    def _open_head_refusal(self) -> _Refused | None:
        """Checked after each read that leaves a head open."""
        # Lines counted include the request line.
        if max(len(self.headers), self._head_lines - 1) > self.limits.max_headers:
            return self._too_many_headers()
        if max(self._head_read, self._parsed_head_bytes()) > self.limits.max_head_bytes:
            return self._head_too_large()
        return None

    def _parsed_head_bytes(self) -> int:
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    # ---- refusals -----------------------------------------------------------------

    def _too_many_headers(self) -> _Refused:
        return _Refused(
            431, f"The request has more than {self.limits.max_headers} headers.", "request_header_fields_too_large"
        )

    def _head_too_large(self) -> _Refused:
        return _Refused(
            431,
            f"The request's headers are larger than this gateway accepts ({self.limits.max_head_bytes} bytes).",
            "request_header_fields_too_large",
        )

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._busy():
            # The head is queued behind a response still being written: its time
            # starts when that one ends.
            self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)
            return
        self._refuse(
            _Refused(
                408,
                f"The request's headers did not arrive within {self.limits.head_timeout_s:g} s.",
                "request_timeout",
            )
        )

    def _refuse(self, refusal: _Refused) -> None:
        self._refused = True
        self._cancel_head_timer()
        self._unset_keepalive_if_required()
        if self._head_open:
            self.headers.clear()  # what the parser handed over of a refused head, freed now
        if self.transport.is_closing():
            return
        if refusal.status is None:
            # Too many pipelined: answer what is queued, read nothing more, then close.
            self.flow.pause_reading()
            last = self.pipeline[0][0] if self.pipeline else self.cycle
            if last is not None and not last.response_complete:
                last.keep_alive = False
                return
        elif not self._busy():
            self.transport.write(_raw_error(refusal.status, refusal.message, refusal.code))
            if self.transport.can_write_eof():
                # Close our side after the answer, and drop what the client still
                # sends for a moment: closing with unread bytes would reset the
                # connection, and a reset can discard the answer before it is read.
                self.transport.write_eof()
                self.loop.call_later(LINGER_S, self.transport.close)
                return
        self.transport.close()

    def _invalid(self) -> None:
        self.logger.warning("Invalid HTTP request received.")
        self._refused = True
        self._cancel_head_timer()
        self.send_400_response("Invalid HTTP request received.")

    # ---- state --------------------------------------------------------------------

    def _busy(self) -> bool:
        """A response is being produced or waits in the pipeline."""
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _idle(self) -> bool:
        return not self._head_open and not self._busy()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None


def _raw_error(status: int, message: str, code: str) -> bytes:
    body = orjson.dumps(GatewayError(status, message, code=code).to_dict())
    phrase = http.HTTPStatus(status).phrase
    return (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body
