"""gateway/openai/api_routes.py's document built in process: each documented route's method,
summary, answer shape and error answers, the generating routes listed by name, the title,
description and version, the document built once; and the handlers' wrapping (a handler's
docstring kept, never functools.partial's)."""

from __future__ import annotations

import functools

from gateway.app import Gateway, create_app
from gateway.config.schema import parse_config
from gateway.openai import api_routes
from gateway.openai.api_routes import DESCRIPTION, ERRORS, GENERATING_ROUTES, openapi_document

CONFIG = {"models": {"m": {"backends": [{"name": "b", "adapter": "openai", "url": "http://127.0.0.1:9/v1"}]}}}
SUMMARIES = {
    ("/v1/models", "get"): ("The models this credential may use", "ModelList"),
    ("/v1/models/{model_id}", "get"): ("One model", "ModelCard"),
    ("/v1/embeddings", "post"): ("Embeddings", "EmbeddingList"),
    ("/tokenize", "post"): ("Token ids of a prompt", "TokenizeResponse"),
    ("/detokenize", "post"): ("The text of token ids", "DetokenizeResponse"),
    ("/v1/responses/{response_id}", "get"): ("A stored response (OpenAI's shape)", None),
    ("/v1/responses/{response_id}", "delete"): ("Delete a stored response", None),
    ("/v1/responses/{response_id}/input_items", "get"): ("A stored response's input", None),
    ("/healthz", "get"): ("The process is alive", "Health"),
    ("/readyz", "get"): ("This process can serve; per-model detail", "Readiness"),
}
ERROR_TEXTS = {
    "400": "The request is invalid (the message and `param` say what).",
    "401": "No valid credential.",
    "404": "No such model (or one this credential may not use), or no such stored response.",
    "429": "A quota or the model's queue is full (`Retry-After` says when to try again).",
    "503": "No backend can serve it now, or the gateway is draining.",
}


def document() -> tuple[dict, object]:
    app = create_app(Gateway(parse_config(CONFIG)))
    return openapi_document(app), app


def test_each_documented_route_has_its_method_summary_shape_and_errors():
    doc, _ = document()
    operations = {(path, method): op for path, item in doc["paths"].items() for method, op in item.items()}
    for (path, method), (summary, shape) in SUMMARIES.items():
        op = operations[(path, method)]
        assert op["summary"] == summary, path
        assert "partial(func" not in op.get("description", ""), path
        answer = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer.get("$ref", "").rsplit("/", 1)[-1] == (shape or ""), path
        for code, text in ERROR_TEXTS.items():
            error = op["responses"][code]
            assert error["description"] == text
            assert error["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorEnvelope")
    assert set(operations) == set(SUMMARIES) | {(path, "post") for path in GENERATING_ROUTES}


def test_a_request_body_is_documented_from_its_model_and_never_read_by_fastapi():
    doc, _ = document()
    for path, model in (("/v1/embeddings", "EmbeddingRequest"), ("/tokenize", "TokenizeRequest")):
        body = doc["paths"][path]["post"]["requestBody"]
        assert body["required"] is True
        schema = body["content"]["application/json"]["schema"]
        assert schema["title"] == model and "$defs" not in schema
    detok = doc["paths"]["/detokenize"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert detok["required"] == ["model", "tokens"]


def test_the_generating_routes_are_listed_by_name_with_the_same_errors():
    doc, _ = document()
    for path, summary in GENERATING_ROUTES.items():
        op = doc["paths"][path]["post"]
        assert op["summary"] == summary
        assert op["requestBody"] == {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
        assert op["responses"] == {
            "200": {"description": "JSON, or `text/event-stream` when `stream` is true"},
            **{code: {"description": text} for code, text in ERROR_TEXTS.items()},
        }
    assert set(ERRORS) == {400, 401, 404, 429, 503}


def test_the_document_is_titled_described_versioned_and_built_once():
    doc, app = document()
    assert doc["info"] == {"title": "Switchyard", "description": DESCRIPTION, "version": app.version}
    assert DESCRIPTION.startswith("One OpenAI-compatible API in front of interchangeable LLM runtimes")
    assert openapi_document(app) is doc


def test_the_version_is_the_installed_one_or_unknown(monkeypatch):
    monkeypatch.setattr(api_routes, "installed_version", lambda: "unknown")
    assert api_routes.gateway_version() == "0+unknown"
    monkeypatch.setattr(api_routes, "installed_version", lambda: "1.2.3")
    assert api_routes.gateway_version() == "1.2.3"


async def test_a_wrapped_handler_answers_as_the_handler_and_keeps_its_docstring():
    async def handler(request):
        """The handler's own words."""
        return ("answered", request)

    wrapped = api_routes._wrap(handler)
    assert await wrapped("r") == ("answered", "r")
    assert wrapped.__doc__ == "The handler's own words."
    assert api_routes._wrap(functools.partial(handler)).__doc__ is None
