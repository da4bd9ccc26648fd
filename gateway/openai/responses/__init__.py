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
  handlers.py        the four operations as plain async functions

Wiring (the HTTP layer's part; nothing here imports Starlette):

  POST   /v1/responses                         prepare_response(...) then run_response(...)
  GET    /v1/responses/{response_id}           get_response(id, tenant=, store=, query=)
  DELETE /v1/responses/{response_id}           delete_response(id, tenant=, store=)
  GET    /v1/responses/{response_id}/input_items  list_input_items(id, tenant=, store=, query=)

- `tenant`: the authenticated principal's tenant (`""` when auth is off). Every
  store access is scoped by it; another tenant's id answers 404.
- `may_read`: whether the principal may use a model (`Protection.may_use`); a
  response made on a model it may not use answers 404 too (default: any model).
- `store`: one `ResponseStore` for the process: `RedisResponseStore(url)` when
  replicas share Redis (a continuation may land on any replica), else
  `MemoryResponseStore()`. Close it (`aclose`) at shutdown.
- `query`: the request's query pairs (`request.query_params.multi_items()`).
- Creation in two steps, so admission sits between them as for chat:
  authenticate (tenant) -> `prepared = await prepare_response(body, tenant=,
  store=, request_id=)` (validation and the previous response's conversation)
  -> model check, `may_use`, quota/admission with `prepared.generation` (a chat
  `GenerationRequest`; set its `priority`/`deadline` as for chat) ->
  `result = await run_response(prepared, run=run, store=store)`.
  `create_response` does both steps in one call where no admission is needed.
- `run`: `async def run(req) -> AsyncIterator[Event]` that opens the generation
  and returns its events, e.g. `(await gateway.dispatcher.open(req.model, [req]))[1]`
  wrapped so metrics and the ticket see the events (usage, TTFT). It raises
  `GatewayError` when nothing could start (answered as a JSON error, the client
  has seen nothing); closing the events must abort the work.
- Results: `JSONResult(body, status)` -> a JSON response. `StreamResult` -> a
  `text/event-stream` response (`cache-control: no-cache`) that iterates it;
  call `aclose()` when the client leaves (also before the first byte) so the
  generation is aborted. `GatewayError` raised by any handler -> the gateway's
  error envelope (`gateway.http.envelope.error_response`).
"""

from gateway.openai.responses.handlers import (
    JSONResult,
    PreparedResponse,
    Runner,
    StreamResult,
    create_response,
    delete_response,
    get_response,
    list_input_items,
    prepare_response,
    run_response,
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
    "Runner",
    "StoredResponse",
    "StreamResult",
    "create_response",
    "delete_response",
    "get_response",
    "list_input_items",
    "prepare_response",
    "run_response",
]
