"""OpenAI's Responses API (`/v1/responses`) over the canonical contract, the same on
every runtime. Nothing here imports Starlette (the routes are in `routes.py`);
docs/architecture.md, "The Responses API", says how the modules fit together.
"""

from gateway.openai.responses.handlers import (
    JSONResult,
    PreparedResponse,
    delete_response,
    get_response,
    list_input_items,
    prepare_response,
)
from gateway.openai.responses.store import ResponseNotFound, ResponseStore, StoredResponse
from gateway.openai.responses.store_memory import MemoryResponseStore
from gateway.openai.responses.store_redis import RedisResponseStore

__all__ = [
    "JSONResult",
    "MemoryResponseStore",
    "PreparedResponse",
    "RedisResponseStore",
    "ResponseNotFound",
    "ResponseStore",
    "StoredResponse",
    "delete_response",
    "get_response",
    "list_input_items",
    "prepare_response",
]
