"""Stored responses: what `GET /v1/responses/{id}`, `input_items` and a continuation
(`previous_response_id`) read back. A record holds the response as answered and the
context it was generated from, so a continuation is `context + output` and never walks
a chain. Every operation names a tenant: another tenant's id is simply absent
(`ResponseNotFound`, 404, never 403, so ids cannot be probed across tenants).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import orjson

DEFAULT_TTL_S = 30 * 24 * 3600.0  # OpenAI keeps stored responses for 30 days


class ResponseNotFound(LookupError):
    """No response with this id for this tenant (never stored, expired, deleted, or another tenant's)."""


@dataclass(slots=True)
class StoredResponse:
    response: dict[str, Any]
    context: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return self.response["id"]

    def conversation(self) -> list[dict[str, Any]]:
        """What a continuation of this response starts from."""
        return self.context + self.response["output"]

    def to_bytes(self) -> bytes:
        return orjson.dumps({"response": self.response, "context": self.context})

    @classmethod
    def from_bytes(cls, raw: bytes | str) -> StoredResponse:
        data = orjson.loads(raw)
        return cls(data["response"], data["context"])


class ResponseStore(ABC):
    """Where stored responses live. Methods raise `ResponseNotFound` for a missing
    id and a 503 `GatewayError` when the store cannot be reached.

    Every tenant has its own share (entries and bytes, `response_store.tenant_max_*`):
    what a tenant stores can only push out that tenant's own older responses."""

    @property
    @abstractmethod
    def max_record_bytes(self) -> int:
        """The largest record one tenant may store (its byte share)."""

    @abstractmethod
    async def put(self, tenant: str, record: StoredResponse) -> None:
        """Store `record`, making room from `tenant`'s own oldest records only; a
        record over `max_record_bytes` is refused with 413 `response_too_large`."""

    @abstractmethod
    async def get(self, tenant: str, response_id: str) -> StoredResponse: ...

    @abstractmethod
    async def delete(self, tenant: str, response_id: str) -> None: ...

    async def aclose(self) -> None:
        return None
