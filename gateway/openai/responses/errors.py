"""The errors this API answers with, and how client values appear in messages.

Every refusal is a `GatewayError` naming the offending `param`, so the gateway's
one error envelope carries it. Client values quoted in messages are clipped: a
hostile request must not be able to make an error message arbitrarily large.
"""

from __future__ import annotations

from typing import Any

from adapters.errors import GatewayError


def unsupported(message: str, param: str) -> GatewayError:
    """A valid OpenAI parameter or value this gateway cannot honour."""
    return GatewayError(400, message, param=param, code="unsupported_parameter")


def not_found(response_id: Any, param: str) -> GatewayError:
    """The one answer for a response that is missing, expired, deleted or another tenant's."""
    return GatewayError(404, f"Response with id {short(response_id)} not found.", param=param, code="not_found")


def store_unavailable() -> GatewayError:
    """The store cannot be reached. What went wrong (Redis's own text: addresses,
    OOM messages) is the operator's, logged where it happened; a tenant gets this."""
    return GatewayError(503, "The response store is unavailable. Retry shortly.", code="response_store_unavailable")


def response_too_large(size: int, limit: int) -> GatewayError:
    """A response larger than a tenant may store (`response_store.tenant_max_bytes`):
    refused before generation when the request alone is that large."""
    return GatewayError(
        413,
        f"The response would take at least {size} bytes to store, more than the {limit} this gateway stores "
        "per tenant. Send it with store: false, or make it smaller (input, instructions, tools, text.format).",
        param="store",
        code="response_too_large",
    )


def store_full() -> GatewayError:
    """The whole store is full and the tenant has nothing of its own to make room from."""
    return GatewayError(503, "The response store is full. Retry later.", code="response_store_full")


def short(value: Any) -> str:
    """A client value for an error message, never long."""
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def clip(key: str) -> str:
    """A client-chosen key inside a `param` path, kept short."""
    return key if len(key) <= 64 else key[:64] + "..."
