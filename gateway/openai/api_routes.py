"""The routes that generate nothing, declared to FastAPI with their shapes, so that
`GET /openapi.json` documents them (models, embeddings, tokenize, the stored responses,
health and readiness).

The handlers are the gateway's own (authentication, body reading with its limits,
errors in OpenAI's envelope): FastAPI reads no body here and validates no answer; the
models below only describe what the handlers accept and answer. The generating routes
(`POST /v1/chat/completions`, `/v1/completions`, `/v1/responses`) stay raw ASGI on the
measured hot path (gateway/app.py) and are listed in the document by name, their
shapes being OpenAI's own (docs/openai-checklist.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from processes.install import installed_version

Handler = Callable[[Request], Awaitable[Any]]


def gateway_version() -> str:
    found = installed_version()
    return "0+unknown" if found == "unknown" else found


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(BaseModel):
    error: ErrorDetail


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class EmbeddingRequest(BaseModel):
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # base64 of little-endian float32 with encoding_format "base64"


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class TokenizeRequest(BaseModel):
    """vLLM's shape: `prompt`, or chat `messages` rendered with the model's template."""

    model: str
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(BaseModel):
    model: str
    tokens: list[int]


class DetokenizeResponse(BaseModel):
    prompt: str


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    """`status` is this process's readiness (started, config loaded, not draining);
    `models` (or, with `?model=M`, `model` and `backends`) the per-model detail."""

    status: Literal["ready", "not_ready"]
    models: dict[str, Any] | None = None
    model: str | None = None
    backends: list[dict[str, Any]] | None = None


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorEnvelope, "description": what}
    for code, what in (
        (400, "The request is invalid (the message and `param` say what)."),
        (401, "No valid credential."),
        (404, "No such model (or one this credential may not use), or no such stored response."),
        (429, "A quota or the model's queue is full (`Retry-After` says when to try again)."),
        (503, "No backend can serve it now, or the gateway is draining."),
    )
}

DESCRIPTION = (
    "One OpenAI-compatible API in front of interchangeable LLM runtimes (vLLM, SGLang, "
    "TensorRT-LLM, TGI, the native engine). Errors use OpenAI's envelope."
)
GENERATING_ROUTES = {
    "/v1/chat/completions": "Chat completions, streamed or not: OpenAI's request and answer shapes.",
    "/v1/completions": "Legacy completions, streamed or not: OpenAI's request and answer shapes.",
    "/v1/responses": "The Responses API, streamed (typed events) or not: OpenAI's shapes.",
}


def _body(model: type[BaseModel]) -> dict[str, Any]:
    """An `openapi_extra` request body: the handler reads the body itself (its size and
    depth limits), so FastAPI must not."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _wrap(handler: Handler) -> Callable[[Request], Awaitable[Any]]:
    """The handler with a signature FastAPI can read (it inspects annotations; bound
    methods and partials of the gateway's handlers work, but say nothing of a path
    parameter)."""

    async def endpoint(request: Request) -> Any:
        return await handler(request)

    # A partial's own __doc__ is functools.partial's, which the document must not show.
    endpoint.__doc__ = None if isinstance(handler, partial) else handler.__doc__
    return endpoint


def mount_documented(app: FastAPI, routes: dict[str, Handler]) -> None:
    """Mount the non-generating handlers (by role) with their documented shapes."""

    def add(path: str, role: str, method: str, model: type[BaseModel] | None, summary: str, **extra: Any) -> None:
        app.add_api_route(
            path,
            _wrap(routes[role]),
            methods=[method],
            response_model=model,
            responses=ERRORS,
            summary=summary,
            **extra,
        )

    add("/v1/models", "list_models", "GET", ModelList, "The models this credential may use")
    add("/v1/models/{model_id:path}", "get_model", "GET", ModelCard, "One model")
    add("/v1/embeddings", "embeddings", "POST", EmbeddingList, "Embeddings", openapi_extra=_body(EmbeddingRequest))
    add(
        "/tokenize", "tokenize", "POST", TokenizeResponse, "Token ids of a prompt", openapi_extra=_body(TokenizeRequest)
    )
    add(
        "/detokenize",
        "detokenize",
        "POST",
        DetokenizeResponse,
        "The text of token ids",
        openapi_extra=_body(DetokenizeRequest),
    )
    add("/v1/responses/{response_id}", "retrieve_response", "GET", None, "A stored response (OpenAI's shape)")
    add("/v1/responses/{response_id}", "delete_response", "DELETE", None, "Delete a stored response")
    add("/v1/responses/{response_id}/input_items", "response_input_items", "GET", None, "A stored response's input")
    add("/healthz", "healthz", "GET", Health, "The process is alive")
    add("/readyz", "readyz", "GET", Readiness, "This process can serve; per-model detail")


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document of the declared routes, plus the generating routes by name."""
    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version=app.version, description=DESCRIPTION, routes=app.routes)
        for path, summary in GENERATING_ROUTES.items():
            doc["paths"][path] = {
                "post": {
                    "summary": summary,
                    "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
                    "responses": {
                        "200": {"description": "JSON, or `text/event-stream` when `stream` is true"},
                        **{str(code): {"description": e["description"]} for code, e in ERRORS.items()},
                    },
                }
            }
        app.openapi_schema = doc
    return app.openapi_schema


def openapi_route(app: FastAPI) -> Handler:
    async def openapi_json(request: Request) -> Response:
        from gateway.http.envelope import json_response

        return json_response(openapi_document(app))

    return openapi_json
