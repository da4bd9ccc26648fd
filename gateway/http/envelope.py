"""OpenAI-shaped JSON responses, errors included (one envelope for every error)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from adapters.errors import GatewayError


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json", headers=headers)


def error_response(err: GatewayError, request_id: str | None = None) -> Response:
    headers = dict(err.headers)
    if request_id:
        headers["x-request-id"] = request_id
    retry_after = err.retry_after
    if retry_after is None and err.status in (429, 503):
        retry_after = 1.0  # an upstream's overload carries no estimate of its own: a short, honest hint
    if retry_after is not None:
        headers["retry-after"] = str(max(1, int(retry_after + 0.999)))
    return json_response(err.to_dict(), err.status, headers)


def route_error_handler(served: str):
    """Starlette's 404 and 405 in the gateway's error envelope, naming what this listener serves."""

    async def handler(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
        if status == 404:
            message = f"No route {request.method} {request.url.path}. This gateway serves {served}."
            err = GatewayError(404, message, code="not_found")
        elif status == 405:
            err = GatewayError(
                405, f"Method {request.method} is not allowed on {request.url.path}.", code="method_not_allowed"
            )
        else:
            err = GatewayError(status, str(getattr(exc, "detail", "")))
        return error_response(err)

    return handler
