"""A request's deadline from the timeout its client says it will wait
(docs/architecture.md, "A request's way through"): `x-request-timeout`, else the Node
SDK's `x-stainless-timeout`, else, not streamed only, the Python SDK's
`x-stainless-read-timeout` (a read timeout bounds a whole answer only when nothing is
sent before it). Clamped to `limits.max_request_timeout_s` (the SDKs send their default
on every request: refusing a longer one would refuse them all); a value that is not a
positive finite number is a 400 naming the header. A time.monotonic() value.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from adapters.errors import invalid_request

TIMEOUT_HEADERS = ("x-request-timeout", "x-stainless-timeout", "x-stainless-read-timeout")
READ_TIMEOUT_HEADER = "x-stainless-read-timeout"


def client_timeout_s(headers: Mapping[str, str], *, stream: bool = False) -> tuple[str, float] | None:
    """The first timeout header that applies and its value in seconds, or None."""
    if headers.keys().isdisjoint(TIMEOUT_HEADERS):
        return None  # none sent (most requests): no header to look up one by one
    for name in TIMEOUT_HEADERS:
        raw = headers.get(name)
        if name == READ_TIMEOUT_HEADER and stream:
            continue
        if raw is None:
            continue
        try:
            seconds = float(raw.strip())
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or seconds <= 0:
            shown = raw if len(raw) <= 32 else raw[:29] + "..."
            raise invalid_request(
                f"The '{name}' header must be a positive number of seconds; got {shown!r}.",
                code="invalid_request_timeout",
            )
        return name, seconds
    return None


def request_deadline(
    headers: Mapping[str, str], cap_s: float, *, stream: bool = False, now: float | None = None
) -> float | None:
    """The time.monotonic() at which the client stops waiting, capped at `cap_s`
    from `now`; None when the client sent no timeout that applies."""
    found = client_timeout_s(headers, stream=stream)
    if found is None:
        return None
    return (time.monotonic() if now is None else now) + min(found[1], cap_s)
