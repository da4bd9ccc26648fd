"""OpenAI's Responses API (`/v1/responses`) over the canonical contract.

Adapters decode every runtime into one event stream; this package speaks the
Responses API from it, so the API behaves the same on every runtime. Modules:

  request.py, request_options.py, input_items.py   body -> ResponsesRequest (every 400 names its param)
  conversation.py    items -> chat messages; ResponsesRequest (+ stored history) -> GenerationRequest
  output.py          canonical events -> output items and the item events
  encoder.py         the response object (ResponseAssembly) and its SSE stream (ResponseStreamEncoder)
  response_object.py the `response` object's fixed part, usage and error shapes
  store.py           the store interface and record; store_memory.py, store_redis.py
  listing.py         input_items' cursor list
  answer.py          the answer format `Generation` runs with on the chat path (gateway/app.py routes it)
  handlers.py        the body read (`prepare_response`, the route's parse) and the three store operations

Wiring: gateway/openai/responses/routes.py (nothing here imports Starlette), and
docs/architecture.md, "The Responses API".
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
