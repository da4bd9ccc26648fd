"""One error type for the whole request path: an OpenAI error code, an HTTP status
and a message a user can act on. Adapters raise it, policies raise it, the gateway
encodes it once (JSON envelope, or an SSE error event after the first byte)."""

from __future__ import annotations


class GatewayError(Exception):
    """An error that becomes `{"error": {"message", "type", "param", "code"}}`.

    `retryable` marks failures that happened before the runtime did any work the
    client could see (connection refused, upstream 503): the gateway may fail over.
    `retry_after` (seconds) becomes the Retry-After header on 429/503.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or default_type(status)
        self.code = code
        self.param = param
        self.retryable = retryable
        self.retry_after = retry_after
        self.headers = headers or {}

    def to_dict(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def __repr__(self) -> str:
        return f"GatewayError({self.status}, {self.code!r}, {self.message!r})"


def default_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "invalid_request_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error" if status != 503 else "service_unavailable_error"
    return "invalid_request_error"


def invalid_request(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


def context_length_exceeded(message: str) -> GatewayError:
    return GatewayError(400, message, param="messages", code="context_length_exceeded")


def model_not_found(model: str) -> GatewayError:
    return GatewayError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


def upstream_unavailable(backend: str, detail: str) -> GatewayError:
    return GatewayError(503, f"Backend {backend} is unavailable: {detail}", code="backend_unavailable", retryable=True)


def upstream_failed(backend: str, detail: str, status: int = 502) -> GatewayError:
    return GatewayError(status, f"Backend {backend} failed: {detail}", code="upstream_error")
