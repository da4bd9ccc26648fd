"""The OpenAI dialect: the generic `openai` adapter's, and the base of every runtime's.

A runtime dialect overrides what its runtime says differently (adapters/dialect.py).
Bodies come from adapters/openai_wire.py (streams always ask for usage: the gateway
needs it for quotas and strips it unless the client asked); errors go through the one
table of upstream statuses (adapters/runtime_errors.py); the one-shot calls speak
OpenAI's `/embeddings` and vLLM's `/tokenize` and `/detokenize`, the gateway's own shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from adapters import oneshot_wire
from adapters import openai_wire as wire
from adapters.base import Capabilities, Event, GenerationRequest, LoadSnapshot, ParameterSupport
from adapters.dialect import Call, EventFilter, Reader
from adapters.errors import GatewayError, invalid_request, upstream_failed
from adapters.oneshot import (
    DetokenizeRequest,
    DetokenizeResult,
    EmbeddingRequest,
    EmbeddingResult,
    TokenizeRequest,
    TokenizeResult,
)
from adapters.runtime_errors import ParsedError, runtime_error


class OpenAIDialect:
    runtime = "OpenAI-compatible"
    api_prefix = ""  # the generic adapter's url includes the API's path
    health_path = "/models"
    health_timeout_s = 5.0
    context_pattern: re.Pattern[str] | None = None  # the runtime's context-length message
    parameters = ParameterSupport()  # every sampling parameter passes
    abort_hint = ""

    def __init__(self, backend: str, served_model: str | None = None, options: Mapping[str, Any] | None = None):
        self.backend = backend
        self.served_model = served_model
        self.options: Mapping[str, Any] = options or {}
        self.capabilities = self.declare_capabilities()

    def declare_capabilities(self) -> Capabilities:
        """`options.embeddings: false` when the upstream's model cannot embed."""
        return Capabilities(
            tools=self.option("tools", True), cached_tokens=True, embeddings=self.option("embeddings", True)
        )

    def option(self, name: str, default: bool) -> bool:
        return bool(self.options.get(name, default))

    def unsupported(self, feature: str, param: str | None = None) -> GatewayError:
        return invalid_request(
            f"The backend serving this model runs {self.runtime}, which does not support {feature}.",
            param=param,
            code="unsupported_by_backend",
        )

    # ---- generation ----------------------------------------------------------------------

    def body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        """A sampling parameter the runtime rejects is refused (400 naming the runtime)
        or dropped, as the model's `unsupported_params` says."""
        rejected = self.parameters.unsupported(request.sampling)
        if rejected and request.unsupported_params == "reject":
            why = "; ".join(f"{name}: {self.parameters.rejected[name]}" for name in rejected)
            raise self.unsupported(
                f"{', '.join(rejected)} ({why}); the model's `unsupported_params: drop` would drop them",
                rejected[0],
            )
        body = wire.build_body(request, self.served_model, stream=stream)
        for name in rejected:
            body.pop(name, None)
        return body

    def decode_data(self, data: bytes, chat: bool) -> list[Event]:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise upstream_failed(
                self.backend, "it sent a stream event that is not JSON", internal=repr(data[:200])
            ) from None
        if not isinstance(payload, dict):
            return []
        if payload.get("error"):
            raise self.error(500, payload)
        return self.decode_chunk(payload, chat)

    def decode_answer(self, raw: bytes, chat: bool) -> list[Event]:
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise upstream_failed(self.backend, "its answer was not JSON", internal=repr(raw[:200])) from None
        if not isinstance(payload, dict):
            raise upstream_failed(self.backend, "its answer was not a JSON object", internal=repr(raw[:200]))
        if payload.get("error"):
            raise self.error(502, payload)
        return self.decode_response(payload, chat)

    def decode_chunk(self, payload: dict, chat: bool) -> list[Event]:
        return wire.decode_chunk(payload, chat, self.backend)

    def decode_response(self, payload: dict, chat: bool) -> list[Event]:
        return wire.decode_response(payload, chat, self.backend)

    def event_filter(self, request: GenerationRequest) -> EventFilter | None:
        return None

    def abort_calls(self, request: GenerationRequest) -> list[Call]:
        return []

    # ---- errors, load ------------------------------------------------------------------------

    def classify(self, status: int, parsed: ParsedError) -> int | None:
        """A status to use instead of the one the body or HTTP gave, before the table
        maps it (500 there means "the backend's fault", answered as 502)."""
        return None

    def error(self, status: int, body: bytes | dict) -> GatewayError:
        return runtime_error(
            status,
            body,
            backend=self.backend,
            runtime=self.runtime,
            context_pattern=self.context_pattern,
            classify=self.classify,
        )

    async def load(self, http: Reader) -> LoadSnapshot:
        return LoadSnapshot()

    async def ready(self, http: Reader) -> None:
        return None

    # ---- one-shot calls (adapters/oneshot.py) --------------------------------------------------

    def embed_call(self, request: EmbeddingRequest) -> Call:
        return Call(self.api_prefix + "/embeddings", oneshot_wire.embedding_body(request, self.served_model))

    def read_embeddings(self, payload: Any, request: EmbeddingRequest) -> EmbeddingResult:
        return oneshot_wire.decode_embeddings(payload, len(request.inputs), self.backend)

    def render_call(self, request: TokenizeRequest) -> Call | None:
        return None

    def rendered(self, request: TokenizeRequest, payload: Any) -> TokenizeRequest:
        return request

    def tokenize_call(self, request: TokenizeRequest) -> Call:
        return Call("/tokenize", oneshot_wire.tokenize_body(request, self.served_model))

    def read_tokenize(self, payload: Any, request: TokenizeRequest) -> TokenizeResult:
        return oneshot_wire.decode_tokenize(payload, self.backend, request.return_token_strs)

    def detokenize_call(self, request: DetokenizeRequest) -> Call:
        return Call("/detokenize", oneshot_wire.detokenize_body(request, self.served_model))

    def read_detokenize(self, payload: Any, request: DetokenizeRequest) -> DetokenizeResult:
        return oneshot_wire.decode_detokenize(payload, self.backend, "prompt")
