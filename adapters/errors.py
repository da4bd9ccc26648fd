"""One error type for the whole request path: an OpenAI error code, an HTTP status
and a message a user can act on. Adapters raise it, policies raise it, the gateway
encodes it once (JSON envelope, or an SSE error event after the first byte).

A tenant sees the message, so a message never names a backend, its URL or its
host: what the gateway knows about its own topology (which backend, the address,
the low-level cause) goes to the log, with the backend's name, where it is built
(the `upstream_*` builders below)."""

from __future__ import annotations

import logging
from enum import Enum

from policies.redact import public_message, shown_name

log = logging.getLogger("switchyard.upstream")

# What a tenant is told about the backend at fault: never its name or address.
THE_BACKEND = "The backend serving this model"


class FailureKind(Enum):
    """What kind of backend failure an error is, when it is one (what the pool's outlier
    detector counts, policies/ejection.py). An error with a kind fails over before the
    first byte; one without is the request's own (a client mistake, a refusal)."""

    CONNECT = "connect"  # no connection, or it broke before the first byte
    TIMEOUT = "timeout"  # no first byte in time
    SERVER_ERROR = "server_error"  # a 5xx other than overload
    OVERLOAD = "overload"  # the runtime refused: 429, or 503 overloaded


# The kind of a 5xx built without one: the one place a status decides a failure's kind.
FAILURE_BY_STATUS = {503: FailureKind.OVERLOAD, 504: FailureKind.TIMEOUT}


class GatewayError(Exception):
    """An error that becomes `{"error": {"message", "type", "param", "code"}}`.

    `failure`: the kind of backend failure it is; a 5xx whose builder names none is
    one by its status (`FAILURE_BY_STATUS`). Before the first byte such a failure is
    tried on another backend (`fails_over`), whatever its status and code; a rollout's
    analysis classes the answer by it (gateway/serving/rollout.py).
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
        failure: FailureKind | None = None,
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
        if failure is None and status >= 500:
            failure = FAILURE_BY_STATUS.get(status, FailureKind.SERVER_ERROR)
        self.failure = failure
        self.retry_after = retry_after
        self.headers = headers or {}
        self.cancelled_phase = cancelled_phase

    @property
    def fails_over(self) -> bool:
        """Whether, before the first byte, another backend is tried: a backend's failure
        (no connection, overload, a first-byte timeout, a runtime's 5xx); a client's
        mistake (4xx) would fail the same way anywhere."""
        return self.failure is not None

    def to_dict(self) -> dict:
        """The envelope a client reads: the message through the one redaction rule
        (policies/redact.py), so no secret and no unbounded client text reaches it."""
        return {
            "error": {
                "message": public_message(self.message),
                "type": self.type,
                "param": self.param if self.param is None else shown_name(self.param),
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


def internal_error() -> GatewayError:
    """500: a bug of the gateway's (logged where it was caught), never the client's fault."""
    return GatewayError(500, "The gateway hit an internal error; it has been logged.", code="internal_error")


def no_backend(model: str | None = None) -> GatewayError:
    """503: no backend of the model could take the request (all failed, ejected or busy)."""
    of = f"model `{model}`" if model else "this model"
    return GatewayError(
        503, f"No backend of {of} could take the request.", code="no_backend_available", retry_after=1.0
    )


def unsupported_call(model: str, what: str, runtimes: list[str]) -> GatewayError:
    """400: no backend of `model` serves the one-shot call `what` (its runtimes named, never a backend)."""
    return GatewayError(
        400,
        f"The model `{model}` does not serve {what}: its backends ({', '.join(runtimes)}) do not offer it.",
        param="model",
        code="unsupported_by_runtime",
    )


def deadline_exceeded(queued_s: float | None = None, model: str | None = None) -> GatewayError:
    """504: the deadline the client set passed, in the admission queue (`queued_s` there,
    for `model`) or while the answer was made. Not 503 + Retry-After, the queue's own
    limit, which says the gateway is busy: the time the client gave ran out."""
    where = "" if queued_s is None else f": it waited {queued_s:.1f} s in the queue for model `{model}`"
    return GatewayError(
        504, f"The request did not complete within the timeout the client set{where}.", code="deadline_exceeded"
    )


def client_closed(phase: str | None = None) -> GatewayError:
    """499: the client went away before its answer (`phase`: where, when known)."""
    return GatewayError(499, "The client closed the request.", code="client_closed", cancelled_phase=phase)


def upstream_unavailable(backend: str, detail: str) -> GatewayError:
    """No answer could be had from `backend` (refused, reset, closed); may fail over."""
    log.warning("backend %s unavailable: %s", backend, detail)
    return GatewayError(503, f"{THE_BACKEND} is unavailable.", code="backend_unavailable", failure=FailureKind.CONNECT)


def upstream_busy(backend: str, detail: str, waited_s: float) -> GatewayError:
    """Every connection to `backend` stayed in use for the whole pool wait; may fail over."""
    log.warning("backend %s busy: %s", backend, detail)
    return GatewayError(
        503,
        f"{THE_BACKEND} has no free connection (waited {waited_s:g} s); retry later.",
        code="backend_busy",
        failure=FailureKind.OVERLOAD,
        retry_after=1.0,
    )


def upstream_timeout(backend: str, detail: str, limit_s: float, first_byte: bool) -> GatewayError:
    """`backend` sent nothing for too long: before answering (may fail over to another
    backend) or in the middle of its answer (ends the stream). `limit_s`: the limit that
    ran out, as configured (the message states it)."""
    log.warning("backend %s timed out: %s", backend, detail)
    what = "did not start answering" if first_byte else "stopped sending in the middle of its answer"
    return GatewayError(
        504,
        f"{THE_BACKEND} {what} within {limit_s:g} s.",
        code="upstream_timeout",
        failure=FailureKind.TIMEOUT,
    )


def upstream_failed(backend: str, detail: str, status: int = 502, *, internal: str | None = None) -> GatewayError:
    """`backend` failed; `detail` is told to the tenant, `internal` only logged."""
    log.warning("backend %s failed: %s%s", backend, detail, f" ({internal})" if internal else "")
    return GatewayError(status, f"{THE_BACKEND} failed: {detail}", code="upstream_error")


# ---- the rollout admin API (gateway/observe/admin_rollouts.py) ---------------------------


def rollout_not_found(model: str) -> GatewayError:
    """404: no rollout is configured for `model` (or no such model)."""
    return GatewayError(404, f"No rollout is configured for the model `{shown_name(model)}`.", code="not_found")


def rollout_bad_action(action: str, actions: tuple[str, ...]) -> GatewayError:
    return GatewayError(
        400, f"Unknown rollout action `{shown_name(action)}`: one of {', '.join(actions)}.", code="invalid_action"
    )


def rollout_refused(reason: str) -> GatewayError:
    """409: the action does not apply to the rollout's state (the reason says why)."""
    return GatewayError(409, reason, code="rollout_state_conflict")


def rollout_store_unavailable() -> GatewayError:
    """503: the shared rollout state cannot be read or changed now (serving goes on)."""
    return GatewayError(
        503,
        "The rollout state store is unavailable; traffic keeps the last known shares.",
        code="rollout_store_unavailable",
        retry_after=1.0,
    )
