"""Upstream error bodies of every shape -> one `GatewayError` with the status a client expects.

`STATUS_TABLE` is the one table of upstream statuses, for every dialect; `parse_error_body`
reads each runtime's shapes (nested, flat, `{"error": "<text>"}`, TGI's, plain text,
empty: docs/runtimes.md §5); a dialect adds its context-length message and a `classify`
rule. It decides before the first event only; after it, every failure is the
backend's (`mid_stream_failure`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from adapters.errors import THE_BACKEND, FailureKind, GatewayError, context_length_exceeded

log = logging.getLogger("switchyard.upstream")


@dataclass(slots=True)
class ParsedError:
    """What an error body says, whatever its shape. `code` is the status the body
    claims (vLLM's integer `code`, TGI's `http_status_code`), if any; `error_code`
    an OpenAI-style string code (`context_length_exceeded`), if any."""

    message: str
    type: str | None = None
    code: int | None = None
    param: str | None = None
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class UpstreamStatus:
    """What a client gets for one upstream status. `fault` says how the message
    describes the backend (None: a client mistake, the runtime's message as is)."""

    status: int
    code: str | None
    failure: FailureKind | None  # None: the client's mistake, never failed over
    fault: str | None


CLIENT_MISTAKE = UpstreamStatus(400, None, None, None)
BACKEND_FAULT = UpstreamStatus(502, "upstream_error", FailureKind.SERVER_ERROR, "failed")
_DEPLOYMENT_CREDENTIALS = UpstreamStatus(
    502, "upstream_error", FailureKind.SERVER_ERROR, "rejected the gateway's credentials"
)
_UNAVAILABLE = UpstreamStatus(503, "backend_unavailable", FailureKind.CONNECT, "is unavailable")

# Upstream status -> what the client gets. Statuses not listed: other 4xx are client
# mistakes, everything else is the backend's fault.
STATUS_TABLE: dict[int, UpstreamStatus] = {
    400: CLIENT_MISTAKE,
    413: CLIENT_MISTAKE,
    422: CLIENT_MISTAKE,  # TGI's validation status; OpenAI's is 400
    # The gateway authenticated the client already: the runtime rejecting us is a
    # deployment fault, and another backend may accept the request.
    401: _DEPLOYMENT_CREDENTIALS,
    403: _DEPLOYMENT_CREDENTIALS,
    # The gateway maps the tenant's model to the backend's served model; a 404
    # means the backend does not serve what the config says.
    404: UpstreamStatus(502, "upstream_error", FailureKind.SERVER_ERROR, "does not serve the configured model"),
    429: UpstreamStatus(429, "upstream_overloaded", FailureKind.OVERLOAD, "is overloaded"),
    501: UpstreamStatus(400, "unsupported_by_backend", None, "does not support this request"),
    408: _UNAVAILABLE,
    502: _UNAVAILABLE,
    503: _UNAVAILABLE,
    504: _UNAVAILABLE,
}


def upstream_status(status: int) -> UpstreamStatus:
    rule = STATUS_TABLE.get(status)
    if rule is not None:
        return rule
    return CLIENT_MISTAKE if 400 <= status < 500 else BACKEND_FAULT


def _as_status(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 100 <= value <= 599:
        return value
    if isinstance(value, str) and value.isdigit() and 100 <= int(value) <= 599:
        return int(value)
    return None


def parse_error_body(body: bytes | str | dict | None) -> ParsedError:
    """Read any runtime's error body (JSON of any known shape, plain text, or empty)."""
    data: Any = body
    if isinstance(body, (bytes, str)):
        raw = body.encode() if isinstance(body, str) else body
        try:
            data = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            text = raw[:500].decode(errors="replace").strip()
            return ParsedError(text)
    if not isinstance(data, dict):
        return ParsedError("" if data is None else str(data)[:500])
    err = data.get("error", data)
    if isinstance(err, str):
        # TRT-LLM validation, vLLM/SGLang 401, TGI `{"error", "error_type"}`.
        etype = data.get("error_type")
        return ParsedError(err, etype if isinstance(etype, str) else None, _as_status(data.get("code")))
    if isinstance(err, dict):
        message = err.get("message")
        if message is None:
            message = err.get("detail")
        raw_code = err.get("code")
        code = _as_status(raw_code)
        if code is None:
            code = _as_status(err.get("http_status_code"))
        etype = err.get("type")
        param = err.get("param")
        return ParsedError(
            "" if message is None else str(message),
            etype if isinstance(etype, str) else None,
            code,
            param if isinstance(param, str) else None,
            raw_code if isinstance(raw_code, str) and _as_status(raw_code) is None and raw_code else None,
        )
    detail = data.get("detail")  # FastAPI's default shape
    return ParsedError(str(detail) if detail is not None else orjson.dumps(data).decode()[:500])


# Classifies a parsed error for one runtime: returns a status to use instead of
# the generic rule, or None to keep it. It sees the HTTP status and the parse.
Classifier = Callable[[int, ParsedError], "int | None"]


def runtime_error(
    http_status: int,
    body: bytes | str | dict | None,
    *,
    backend: str,
    runtime: str,
    context_pattern: re.Pattern[str] | None = None,
    classify: Classifier | None = None,
) -> GatewayError:
    """The gateway's error for a runtime's error response or in-stream error event.

    In-stream errors arrive under HTTP 200 and the base adapter reports them (and
    error bodies under HTTP 200) as 500/502: for those the body's own code wins."""
    parsed = parse_error_body(body)
    status = http_status
    if parsed.code is not None and http_status in (200, 500, 502):
        status = parsed.code
    if classify is not None:
        status = classify(status, parsed) or status
    message = parsed.message or f"HTTP {status}"
    if context_pattern is not None and context_pattern.search(message):
        return context_length_exceeded(message)
    return _by_status(status, message, parsed, backend, runtime)


def _by_status(status: int, message: str, parsed: ParsedError, backend: str, runtime: str) -> GatewayError:
    rule = upstream_status(status)
    if rule.fault is None:
        return GatewayError(rule.status, message, param=parsed.param, code=parsed.error_code)
    # The tenant learns the runtime, never which backend (its name is in the log).
    log.warning("backend %s (%s) answered %s: %s", backend, runtime, status, message)
    return GatewayError(
        rule.status,
        f"The {runtime} backend serving this model {rule.fault}: {message}",
        code=rule.code,
        failure=rule.failure,
    )


def mid_stream_failure(error: GatewayError, backend: str) -> GatewayError:
    """The gateway's error for a failure after the backend's first event.

    The request was accepted and generation had begun, so it is never the client's
    fault, whatever status the runtime put on it (SGLang sends an engine failure in
    a stream as a 400 `BadRequestError`, TGI says 422 for every in-stream error):
    one classification for every runtime, 502 `server_error` `upstream_error`."""
    if error.status in (BACKEND_FAULT.status, 504):
        return error  # the backend's fault already (or the gateway's timeout on it), in the adapter's words
    # A tenant reads it: the runtime's words, never the backend's name (logged instead).
    log.warning("backend %s failed mid-stream: %s", backend, error.message)
    message = (
        error.message if "backend serving this model" in error.message else f"{THE_BACKEND} failed: {error.message}"
    )
    return GatewayError(BACKEND_FAULT.status, message, code=BACKEND_FAULT.code)
