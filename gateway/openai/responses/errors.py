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


def store_unavailable(detail: str) -> GatewayError:
    return GatewayError(503, f"The response store is unavailable: {detail}", code="response_store_unavailable")


def short(value: Any) -> str:
    """A client value for an error message, never long."""
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def clip(key: str) -> str:
    """A client-chosen key inside a `param` path, kept short."""
    return key if len(key) <= 64 else key[:64] + "..."
