"""One error type for the whole request path: an OpenAI error code, an HTTP status
and a message a user can act on. Adapters raise it, policies raise it, the gateway
encodes it once (JSON envelope, or an SSE error event after the first byte).

A tenant sees the message, so a message never names a backend, its URL or its
host: what the gateway knows about its own topology (which backend, the address,
the low-level cause) goes to the log, with the backend's name, where it is built
(the `upstream_*` builders below)."""

from __future__ import annotations

import logging

from policies.redact import public_message, shown_name

log = logging.getLogger("switchyard.upstream")

# What a tenant is told about the backend at fault: never its name or address.
THE_BACKEND = "The backend serving this model"


class GatewayError(Exception):
    """An error that becomes `{"error": {"message", "type", "param", "code"}}`.

    `retryable` marks failures that happened before the runtime did any work the
    client could see (connection refused, upstream 503): the gateway may fail over.
    `retry_after` (seconds) becomes the Retry-After header on 429/503.
    `cancelled_phase`: on a 499, where the client went away (the cancellation
    metric's `phase` label), when the raiser knows it.
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
        cancelled_phase: str | None = None,
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
        self.cancelled_phase = cancelled_phase

    def to_dict(self) -> dict:
        """The envelope a client reads: the message through the one redaction rule
        (policies/redact.py), so no secret and no unbounded client text reaches it."""
        return {
            "error": {
                "message": public_message(self.message),
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

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


def context_length_exceeded(message: str, kind: str = "chat") -> GatewayError:
    """A prompt too long for the model: about `prompt` on legacy completions, else `messages`."""
    return GatewayError(400, message, param=prompt_param(kind), code="context_length_exceeded")


def prompt_param(kind: str) -> str:
    """The request field that holds the prompt of a generation of this kind."""
    return "prompt" if kind == "completion" else "messages"


def model_not_found(model: str) -> GatewayError:
    return GatewayError(
        404,
        f"The model `{shown_name(model)}` does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


def client_closed(phase: str | None = None) -> GatewayError:
    """499: the client went away before its answer (`phase`: where, when known)."""
    return GatewayError(499, "The client closed the request.", code="client_closed", cancelled_phase=phase)


def upstream_unavailable(backend: str, detail: str) -> GatewayError:
    """No answer could be had from `backend` (refused, reset, closed); may fail over."""
    log.warning("backend %s unavailable: %s", backend, detail)
    return GatewayError(503, f"{THE_BACKEND} is unavailable.", code="backend_unavailable", retryable=True)


def upstream_busy(backend: str, detail: str, waited_s: float) -> GatewayError:
    """Every connection to `backend` stayed in use for the whole pool wait; may fail over."""
    log.warning("backend %s busy: %s", backend, detail)
    return GatewayError(
        503,
        f"{THE_BACKEND} has no free connection (waited {waited_s:g} s); retry later.",
        code="backend_busy",
        retryable=True,
        retry_after=1.0,
    )


def upstream_timeout(backend: str, detail: str, waited_s: float, first_byte: bool) -> GatewayError:
    """`backend` sent nothing for too long: before answering (may fail over to another
    backend) or in the middle of its answer (ends the stream)."""
    log.warning("backend %s timed out: %s", backend, detail)
    what = "did not start answering" if first_byte else "stopped sending in the middle of its answer"
    return GatewayError(
        504, f"{THE_BACKEND} {what} within {waited_s:g} s.", code="upstream_timeout", retryable=first_byte
    )


def upstream_failed(backend: str, detail: str, status: int = 502, *, internal: str | None = None) -> GatewayError:
    """`backend` failed; `detail` is told to the tenant, `internal` only logged."""
    log.warning("backend %s failed: %s%s", backend, detail, f" ({internal})" if internal else "")
    return GatewayError(status, f"{THE_BACKEND} failed: {detail}", code="upstream_error")
