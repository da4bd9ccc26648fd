"""`GET /v1/responses/{id}/input_items`: OpenAI's cursor list over a response's context.

Query: `limit` (1-100, default 20), `order` (`asc` or `desc`, default `desc`,
as OpenAI documents), `after` (an item id of this list: the page starts after
it). The answer: `{"object": "list", "data", "first_id", "last_id", "has_more"}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adapters.errors import invalid_request
from gateway.openai.request_fields import query_int, unknown_parameter
from gateway.openai.responses.errors import short, unsupported

DEFAULT_LIMIT, MAX_LIMIT = 20, 100


@dataclass(slots=True)
class ListQuery:
    limit: int = DEFAULT_LIMIT
    order: str = "desc"
    after: str | None = None


def parse_list_query(query: Sequence[tuple[str, str]]) -> ListQuery:
    out = ListQuery()
    for name, value in query:
        if name == "limit":
            out.limit = query_int(value, "limit", 1, MAX_LIMIT)
        elif name == "order":
            if value not in ("asc", "desc"):
                raise invalid_request(f"'order' must be 'asc' or 'desc'; got {short(value)}.", param="order")
            out.order = value
        elif name == "after":
            out.after = value
        elif name in ("include", "include[]"):
            raise unsupported(f"'include' {short(value)} is not supported by this gateway.", "include")
        else:
            raise unknown_parameter(name)
    return out


def list_page(items: list[dict[str, Any]], query: ListQuery) -> dict[str, Any]:
    ordered = items if query.order == "asc" else items[::-1]
    start = 0
    if query.after is not None:
        ids = [item["id"] for item in ordered]
        if query.after not in ids:
            raise invalid_request(f"'after' {short(query.after)} is not an item of this response.", param="after")
        start = ids.index(query.after) + 1
    page = ordered[start : start + query.limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + query.limit < len(ordered),
    }
