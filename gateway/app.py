"""App assembly: the OpenAI routes, health, readiness and metrics.

Routes are plain Starlette routes on the FastAPI app (no per-request pydantic
model or dependency injection): the request path is parse -> auth -> quota and
admission -> dispatch -> encode, and each step is a function call.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from functools import partial

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from adapters.errors import GatewayError, model_not_found
from gateway.backends import BackendSet
from gateway.config import GatewayConfig
from gateway.dispatch import Dispatcher, check_choices
from gateway.embeddings import embeddings_route
from gateway.generation import Generation
from gateway.metrics import GatewayMetrics, access_logger
from gateway.protection import Protection
from gateway.recorder import Outcome, RequestContext, RequestRecorder
from gateway.requests import estimate_prompt_tokens, parse_chat, parse_completion, parse_json_body
from gateway.responses import error_response, json_response
from gateway.tokenize import detokenize_route, tokenize_route
from gateway.unary import UnaryGate

log = logging.getLogger("switchyard.gateway")

# A client's x-request-id is kept for the logs and the response header when it
# is this shape; otherwise the gateway's own id stands in for it.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def new_request_id() -> str:
    """The gateway's id for one request: 128 random bits (32 hex characters), so
    it can be neither guessed nor repeated. It names the request's generations
    upstream (SGLang's rid, vLLM's request id, the native engine's sequences), so
    one tenant cannot reach another's generation by naming it (an abort by id)."""
    return os.urandom(16).hex()


def client_request_id(value: str | None) -> str | None:
    """The client's x-request-id if it is 1-128 characters of [A-Za-z0-9._:-]; it
    goes to the logs, the traces and the response header, never upstream."""
    return value if value is not None and _CLIENT_ID.fullmatch(value) else None


class Gateway:
    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or GatewayMetrics()
        self.backends = BackendSet(config, registry=self.metrics.registry)
        self.dispatcher = Dispatcher(self.backends, self._count_backend_failure)
        self.protection = Protection.from_config(config, self.metrics.registry)
        self.recorder = RequestRecorder(
            self.metrics, self.backends.pools, access_logger() if config.access_log else None
        )
        self.started_at = int(time.time())

    async def startup(self) -> None:
        await self.protection.start()
        self.protection.set_capacity_provider(self._capacity)
        await self.backends.start()

    async def shutdown(self) -> None:
        await self.backends.aclose()
        await self.protection.aclose()

    def _count_backend_failure(self, backend: str, err: GatewayError) -> None:
        m = self.metrics
        m.child(m.backend_failures, backend, err.code or str(err.status)).inc()

    def _capacity(self, model: str) -> int | None:
        pool = self.backends.pools.get(model)
        return pool.capacity() if pool else None

    # ---- OpenAI routes ---------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def _generate(self, request: Request, chat: bool) -> Response:
        upstream_id = new_request_id()
        ctx = RequestContext(
            request_id=client_request_id(request.headers.get("x-request-id")) or upstream_id,
            started=time.perf_counter(),
            chat=chat,
            upstream_id=upstream_id,
        )
        try:
            raw = await self._read_body(request)
            body = parse_json_body(raw)
            reqs = [parse_chat(body, upstream_id)] if chat else parse_completion(body, upstream_id)
            ctx.model = reqs[0].model
            check_choices(reqs, self.config.limits.max_choices_per_request)
            principal = await self.protection.authenticate(_headers(request))
            ctx.tenant = principal.tenant
            session_id = request.headers.get("x-session-id")
            for r in reqs:
                r.tenant = principal.tenant
                r.priority = principal.tier
                if session_id:
                    r.session_keys["x-session-id"] = session_id
            pool = self.dispatcher.pool(ctx.model)
            if pool is None:
                raise model_not_found(ctx.model)
            for r in reqs:
                r.unsupported_params = pool.config.unsupported_params
            queued_at = time.perf_counter()
            ticket = await self.protection.admit(
                principal,
                ctx.model,
                reqs[0],
                sum(estimate_prompt_tokens(r) for r in reqs),
                request.is_disconnected,
                choices=sum(r.sampling.n for r in reqs),
            )
            ctx.queue_wait = time.perf_counter() - queued_at
        except GatewayError as err:
            return self._fail(ctx, err)
        except ClientDisconnect:
            return self._fail(ctx, GatewayError(499, "client closed the request", code="client_closed"))
        return Generation(self.dispatcher, self.recorder, ctx, ticket, reqs)

    def _fail(self, ctx: RequestContext, err: GatewayError) -> Response:
        self.recorder.finish(ctx, Outcome(err.status, error=err.message))
        return error_response(err, ctx.request_id)

    async def _read_body(self, request: Request) -> bytes:
        limit = self.config.limits.max_body_bytes
        declared = request.headers.get("content-length")
        too_big = GatewayError(
            413, f"The request body is larger than this gateway accepts ({limit} bytes).", code="request_too_large"
        )
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_big
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)

    async def list_models(self, request: Request) -> Response:
        try:
            allowed = await self._allowed_models(request)
        except GatewayError as err:
            return error_response(err)
        return json_response({"object": "list", "data": [self._model_card(m) for m in allowed]})

    async def get_model(self, request: Request) -> Response:
        model_id = request.path_params["model_id"]
        try:
            allowed = await self._allowed_models(request)
            if model_id not in allowed:
                raise model_not_found(model_id)
        except GatewayError as err:
            return error_response(err)
        return json_response(self._model_card(model_id))

    async def _allowed_models(self, request: Request) -> list[str]:
        names = list(self.backends.pools)
        principal = await self.protection.authenticate(_headers(request))
        return [m for m in names if self.protection.may_use(principal, m)]

    def _model_card(self, name: str) -> dict:
        owned_by = self.backends.pools[name].config.owned_by
        return {"id": name, "object": "model", "created": self.started_at, "owned_by": owned_by}

    # ---- operations --------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        ready = self.backends.ready()
        ok = bool(ready) and all(ready.values())
        detail = {
            name: [{"backend": b.name, "healthy": b.health.ok, "detail": b.health.detail} for b in pool.backends]
            for name, pool in self.backends.pools.items()
        }
        return json_response({"status": "ready" if ok else "not_ready", "models": detail}, 200 if ok else 503)

    async def metrics_endpoint(self, request: Request) -> Response:
        for b in self.backends.backends.values():
            self.metrics.backend_healthy.labels(b.name).set(1 if b.health.ok else 0)
            self.metrics.backend_inflight.labels(b.name).set(b.inflight)
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _headers(request: Request) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.scope["headers"]}


class HotPath:
    """The ASGI entry point: the two generation routes go straight to their
    handlers; everything else (models, health, metrics, 404s, lifespan) goes
    through the FastAPI app. Skipping the framework's middleware layers on the
    routes that carry the traffic is a measurable part of the per-request cost
    (`make bench-overhead`)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        gw: Gateway = app.state.gateway
        self.routes = {"/v1/chat/completions": gw.chat, "/v1/completions": gw.completions}

    async def __call__(self, scope, receive, send) -> None:
        handler = self.routes.get(scope.get("path")) if scope["type"] == "http" else None
        if handler is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await handler(request)
        except Exception:
            log.exception("unhandled error on %s", scope["path"])
            response = error_response(
                GatewayError(500, "The gateway hit an internal error; it has been logged.", code="internal_error")
            )
        await response(scope, receive, send)


def create_app(config: GatewayConfig, metrics: GatewayMetrics | None = None) -> FastAPI:
    gw = Gateway(config, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await gw.startup()
        try:
            yield
        finally:
            await gw.shutdown()

    app = FastAPI(title="Switchyard", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.gateway = gw
    app.add_route("/v1/chat/completions", gw.chat, methods=["POST"])
    app.add_route("/v1/completions", gw.completions, methods=["POST"])
    app.add_route("/v1/models", gw.list_models, methods=["GET"])
    app.add_route("/v1/models/{model_id:path}", gw.get_model, methods=["GET"])
    # The calls that generate nothing (gateway/unary.py): one upstream call, one JSON answer.
    gate = UnaryGate(config, gw.protection, gw.backends, gw.recorder, gw.dispatcher.on_failure)
    app.add_route("/v1/embeddings", partial(embeddings_route, gate), methods=["POST"])
    app.add_route("/tokenize", partial(tokenize_route, gate), methods=["POST"])
    app.add_route("/detokenize", partial(detokenize_route, gate), methods=["POST"])
    app.add_route("/healthz", gw.healthz, methods=["GET"])
    app.add_route("/readyz", gw.readyz, methods=["GET"])
    app.add_route("/metrics", gw.metrics_endpoint, methods=["GET"])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            err = GatewayError(
                404,
                f"No route {request.method} {request.url.path}. This gateway serves /v1/chat/completions, "
                "/v1/completions, /v1/embeddings, /v1/models, /tokenize and /detokenize.",
                code="not_found",
            )
        elif exc.status_code == 405:
            err = GatewayError(
                405, f"Method {request.method} is not allowed on {request.url.path}.", code="method_not_allowed"
            )
        else:
            err = GatewayError(exc.status_code, str(exc.detail))
        return error_response(err)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(
            GatewayError(500, "The gateway hit an internal error; it has been logged.", code="internal_error")
        )

    return app
