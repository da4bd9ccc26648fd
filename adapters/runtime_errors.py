"""Runtime error bodies of every shape -> one `GatewayError` with the status a client expects.

The four runtimes disagree on almost everything about errors (RUNTIMES.md section 5,
checklist items 1 and 2):

- vLLM >= 0.10.1 nests `{"error": {message, type, param, code: int}}`; older vLLM,
  SGLang and TRT-LLM send the flat `{"object": "error", message, type, param, code}`.
- TRT-LLM request validation sends `{"error": "<text>"}`; vLLM and SGLang send
  `{"error": "Unauthorized"}` for a bad key; TGI sends `{"error": str, "error_type": str}`
  (and an empty body for 401); TGI in a stream sends `{"error": {message, http_status_code}}`.
- axum (TGI) answers body-type mismatches in plain text.
- No runtime says `context_length_exceeded`: each adapter passes the regex that
  recognises its runtime's message.

`runtime_error` turns any of them into the gateway's error. Client mistakes keep a
4xx and the runtime's message; an upstream that is down or overloaded becomes a
retryable 503/429; anything that is the backend's fault becomes 502.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from adapters.errors import GatewayError, context_length_exceeded


@dataclass(slots=True)
class ParsedError:
    """What an error body says, whatever its shape. `code` is the status the body
    claims (vLLM's integer `code`, TGI's `http_status_code`), if any."""

    message: str
    type: str | None = None
    code: int | None = None
    param: str | None = None


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
        code = _as_status(err.get("code"))
        if code is None:
            code = _as_status(err.get("http_status_code"))
        etype = err.get("type")
        param = err.get("param")
        return ParsedError(
            "" if message is None else str(message),
            etype if isinstance(etype, str) else None,
            code,
            param if isinstance(param, str) else None,
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
    if status in (400, 413, 422):
        # 422 is TGI's validation status; OpenAI's is 400.
        return GatewayError(400, message, param=parsed.param)
    if status in (401, 403):
        # The gateway authenticated the client already: the runtime rejecting us
        # is a deployment fault, and another backend may accept the request.
        return GatewayError(
            502,
            f"Backend {backend} ({runtime}) rejected the gateway's credentials: {message}",
            code="upstream_error",
            retryable=True,
        )
    if status == 404:
        # The gateway maps the tenant's model to the backend's served model; a
        # 404 means the backend does not serve what the config says.
        return GatewayError(
            502,
            f"Backend {backend} ({runtime}) does not serve the configured model: {message}",
            code="upstream_error",
            retryable=True,
        )
    if status == 501:
        return GatewayError(
            400,
            f"Backend {backend} ({runtime}) does not support this request: {message}",
            code="unsupported_by_backend",
        )
    if status == 429:
        return GatewayError(
            429, f"Backend {backend} ({runtime}) is overloaded: {message}", code="upstream_overloaded", retryable=True
        )
    if status in (408, 502, 503, 504):
        return GatewayError(
            503, f"Backend {backend} ({runtime}) is unavailable: {message}", code="backend_unavailable", retryable=True
        )
    if 400 <= status < 500:
        return GatewayError(400, message, param=parsed.param)
    return GatewayError(502, f"Backend {backend} ({runtime}) failed: {message}", code="upstream_error")
