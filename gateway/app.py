"""App assembly: the OpenAI routes, and the operational ones (gateway/observe/ops.py).

Every API route is the one front door (gateway/intake.py: auth, read and parse,
model check, deadline, admission) with its own parse and the exchange that answers
it (gateway/serving/generation.py, oneshot.py), as plain Starlette routes on the
FastAPI app (no per-request pydantic model or dependency injection).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from adapters.errors import GatewayError, internal_error, model_not_found
from adapters.native_work import TEXT_WORK
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import GatewayConfig
from gateway.http.envelope import error_response, json_response, route_error_handler
from gateway.intake import Admitted, ApiRoute, Intake, Intent
from gateway.lifecycle.inflight import InFlight
from gateway.lifecycle.process import Lifecycle, shutting_down
from gateway.lifecycle.reload import ConfigNotApplied, ConfigReloader, ConfigSource, ConfigVersion, preflight_refusal
from gateway.lifecycle.rollout import RolloutController, plans_of, rollout_store
from gateway.lifecycle.rollout_preflight import ConformancePreflight
from gateway.lifecycle.workers import WorkerSlot
from gateway.observe.admin import AdminViews
from gateway.observe.admin_rollouts import RolloutAdmin
from gateway.observe.metrics import GatewayMetrics, access_logger
from gateway.observe.ops import OpsCollector, OpsViews, TextWorkCollector
from gateway.observe.recorder import RequestRecorder, TenantLabels
from gateway.observe.rollout_metrics import RolloutMetrics
from gateway.observe.tracing import Tracing, build_tracing
from gateway.observe.worker_metrics import WorkerMetrics
from gateway.openai.api_routes import gateway_version, mount_documented, openapi_route
from gateway.openai.embeddings import embeddings_route
from gateway.openai.requests import parse_chat, parse_completion
from gateway.openai.responses.routes import ResponsesRoutes
from gateway.openai.tokenize import detokenize_route, tokenize_route
from gateway.protection.gate import Protection
from gateway.protection.worker_quota import WorkerShareStore
from gateway.serving.dispatch import Dispatcher
from gateway.serving.exchange import ExchangeRunner
from gateway.serving.generation import Generation
from gateway.serving.mirror import Mirror
from gateway.serving.oneshot import OneShotCall
from policies.auth import Principal, credential_headers
from policies.rollout_records import RolloutSink

log = logging.getLogger("switchyard.gateway")


class Gateway:
    """`source`: the config file a reload reads again (gateway/lifecycle/reload.py); `worker`:
    this process's place among `serve --workers` (gateway/lifecycle/workers.py); `rollouts`:
    the sink the request path records to and reads its rollout shares from
    (policies/rollout_records.py `RolloutSink`), by default the rollout controller
    (gateway/lifecycle/rollout.py; a test passes a stand-in with fixed shares)."""

    def __init__(
        self,
        config: GatewayConfig,
        metrics: GatewayMetrics | None = None,
        source: ConfigSource | None = None,
        worker: WorkerSlot | None = None,
        tracing: Tracing | None = None,
        rollouts: RolloutSink | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or GatewayMetrics()
        self.tracing = tracing or build_tracing(config.tracing)
        self.backends = BackendSet(config, registry=self.metrics.registry)
        # Rollouts (docs/rollouts.md): the request path's sink and the task that decides.
        self.rollout_plans = plans_of(config)
        self.rollouts = RolloutController(
            rollout_store(config),
            lambda: self.rollout_plans,
            RolloutMetrics(self.metrics.registry),
            preflight=ConformancePreflight(lambda: self.config),
        )
        self.rollout_sink: RolloutSink = self.rollouts if rollouts is None else rollouts
        self.dispatcher = Dispatcher(self.backends, self._count_backend_failure, self.rollout_sink)
        self._draining = False
        self.mirror = Mirror(self.backends, self.rollout_sink, self.metrics, lambda: self._draining)
        # One of several workers on the port (gateway/lifecycle/workers.py): quotas in memory are shared out.
        siblings = worker if worker is not None and worker.count > 1 else None
        self.protection = Protection.from_config(
            config, self.metrics.registry, local_store=WorkerShareStore(siblings.count) if siblings else None
        )
        self.recorder = RequestRecorder(
            self.metrics,
            self.backends.pools,
            access_logger() if config.access_log else None,
            TenantLabels.of(config),
            self.backends.serves_in_process,
            self.rollout_sink,
        )
        self.started_at = int(time.time())
        self.started = False
        # Set by a graceful stop (gateway/lifecycle/process.py): /readyz answers 503 while the
        # process finishes what it has; then new API requests are refused too.
        self.refusing = False
        self.inflight = InFlight()
        self.reloader = ConfigReloader(source or ConfigSource(None), config, self.apply_config, self.metrics.registry)
        self.lifecycle = Lifecycle(self, self.inflight, self.reloader, worker.supervisor_pid if worker else None)
        self.ops = OpsViews(self.backends, self.metrics, lambda: self.ready, self.lifecycle.retired_backends)
        self.metrics.registry.register(OpsCollector(self.backends, lambda: self.protection.auth.keys))
        self.metrics.registry.register(TextWorkCollector(TEXT_WORK))
        self.worker_metrics = (
            WorkerMetrics(siblings, self.ops.metrics_text, self.metrics.registry) if siblings else None
        )
        self.metrics_view = self.worker_metrics.endpoint if self.worker_metrics else self.ops.metrics_endpoint
        # An admin reload one worker applied reaches the others through the supervisor.
        fan_out = functools.partial(os.kill, siblings.supervisor_pid, signal.SIGHUP) if siblings else None
        self.responses_api = ResponsesRoutes(
            config, self.protection, self.metrics.registry, self.recorder, self.tracing
        )
        self.admin = AdminViews(lambda: self.config, self.reloader, worker.describe() if worker else None, fan_out)
        self.rollout_admin = RolloutAdmin(lambda: self.config, self.rollouts)
        self.intake = Intake(
            lambda: self.config,
            self.protection,
            self.backends,
            self.recorder,
            self.tracing,
            lambda: self.reloader.version.id,
        )
        # Every API route's handler: the front door with the route's parse and exchange.
        self.api: dict[str, Callable[[Request], Awaitable[Response]]] = {
            path: functools.partial(self.intake.handle, route) for path, route in self._routes().items()
        }

    @property
    def draining(self) -> bool:
        """Set by a graceful stop (gateway/lifecycle/process.py): /readyz answers 503 while
        the process finishes what it has; mirror copies end at once and none starts."""
        return self._draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self._draining = value
        if value:
            self.mirror.cancel_all()

    @property
    def ready(self) -> bool:
        """This process can serve: started (config loaded, backends checked once) and not draining."""
        return self.started and not self.draining

    async def startup(self) -> None:
        await self.protection.start()
        self.protection.set_capacity_provider(self._capacity)
        await self.backends.start()
        if self.worker_metrics is not None:
            await self.worker_metrics.start()
        self.lifecycle.start()
        self.rollouts.start()
        self.started = True

    async def shutdown(self) -> None:
        self.started = False
        await self.lifecycle.aclose()
        self.mirror.cancel_all()
        await self.rollouts.aclose()
        if self.worker_metrics is not None:
            await self.worker_metrics.aclose()
        await self.backends.aclose()
        await self.protection.aclose()
        await self.responses_api.aclose()
        await self.tracing.aclose()

    async def apply_config(self, config: GatewayConfig, version: ConfigVersion) -> str:
        """Put a validated config in force (gateway/lifecycle/reload.py checked what may change).
        Nothing changes when it raises. Requests under way finish on what they hold."""
        plan = await self.backends.plan(config)
        preflight = config.reload
        if preflight.preflight != "off":
            wait_s = preflight.preflight_timeout_s if preflight.preflight == "wait" else 0.0
            down = await self.backends.preflight(plan, wait_s, preflight.preflight_interval_s)
            if down:
                await self.backends.discard(plan)
                raise ConfigNotApplied(preflight_refusal(down, preflight.preflight, wait_s))
        try:
            await self.protection.reconfigure(config)
        except BaseException:
            await self.backends.discard(plan)
            raise
        # From here on no await: the new config is in force for every request that starts after.
        left = self.reloader.version.counter
        retired = self.backends.apply(plan)
        self.config = config
        self.rollout_plans = plans_of(config)
        self.recorder.access_log = access_logger() if config.access_log else None
        self.lifecycle.retire(left, retired)
        built, gone = {b.name for b in plan.built}, {b.name for b in retired.backends}
        return (
            f"backends: {len(built - gone)} added, {len(gone - built)} removed, {len(built & gone)} changed, "
            f"{len(self.backends.backends) - len(built)} kept"
        )

    def _count_backend_failure(self, backend: str, err: GatewayError) -> None:
        m = self.metrics
        m.backend_failures.labels(backend, err.code or str(err.status)).inc()

    def _capacity(self, model: str) -> int | None:
        pool = self.backends.pools.get(model)
        return pool.capacity() if pool else None

    # ---- OpenAI routes: each is the one front door (gateway/intake.py) with its parse and exchange ----

    def _routes(self) -> dict[str, ApiRoute]:
        call = functools.partial(OneShotCall, self.recorder, on_failure=self.dispatcher.on_failure)
        return {
            "/v1/chat/completions": ApiRoute("chat", _parse_chat, self._generation),
            "/v1/completions": ApiRoute("text_completion", _parse_completion, self._generation),
            # The chat path, with the Responses API's parse and answer format.
            # generate_content: the GenAI conventions' operation for the Responses API
            # (docs/operations.md, "Spans and attributes")
            "/v1/responses": ApiRoute("generate_content", self.responses_api.parse, self._generation),
            "/v1/embeddings": embeddings_route(call),
            "/tokenize": tokenize_route(call),
            "/detokenize": detokenize_route(call),
        }

    def _generation(self, admitted: Admitted) -> Generation:
        ctx, ticket = admitted.ctx, admitted.ticket
        return Generation(
            self.dispatcher, self.recorder, ctx, ticket, admitted.requests, admitted.intent.payload, self.mirror
        )

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
        principal = await self.protection.authenticate(credential_headers(request.scope["headers"]))
        return [m for m in names if self.protection.may_use(principal, m)]

    def _model_card(self, name: str) -> dict:
        owned_by = self.backends.pools[name].config.owned_by
        return {"id": name, "object": "model", "created": self.started_at, "owned_by": owned_by}


async def _parse_chat(body: Any, upstream_id: str, principal: Principal) -> Intent:
    return Intent([parse_chat(body, upstream_id)])


async def _parse_completion(body: Any, upstream_id: str, principal: Principal) -> Intent:
    return Intent(parse_completion(body, upstream_id))


class HotPath:
    """The ASGI entry point: the two generation routes go straight to their
    handlers; everything else (models, health, metrics, 404s, lifespan) goes
    through the FastAPI app. Skipping the framework's middleware layers on the
    routes that carry the traffic is a measurable part of the per-request cost
    (`make bench-overhead`). Requests that arrive on the ops listener (when there
    is one) go to the ops app and nowhere else.

    Every API request (under /v1/) is held in the gateway's `InFlight` while it
    runs, with the config version it started under: a drain waits for it and,
    when its time is up, ends it with an error the client can read
    (gateway/lifecycle/process.py); once the drain refuses new work, it is answered 503."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        gw: Gateway = app.state.gateway
        self.gateway = gw
        self.routes = {path: handler for path, handler in gw.api.items() if path.startswith("/v1/")}
        self.ops_app = ops_app(gw)
        self.ops_port: int | None = None

    def serve_ops_on(self, port: int) -> None:
        """Requests to local port `port` are the ops listener's."""
        self.ops_port = port

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.ops_port is not None and (scope.get("server") or (None, None))[1] == self.ops_port:
            await self.ops_app(scope, receive, send)
            return
        if not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        gw = self.gateway
        if gw.refusing:
            refusal = error_response(shutting_down(gw.config.drain.retry_after_s))
            refusal.headers["connection"] = "close"
            await refusal(scope, receive, send)
            return
        exchange = gw.inflight.enter(gw.reloader.version.counter, send)
        send = exchange.send
        try:  # the route, in this frame (not a coroutine of its own: one frame less per await)
            handler = self.routes.get(scope["path"])
            if handler is None or scope["method"] != "POST":
                await self.app(scope, receive, send)
                return
            request = Request(scope, receive)
            try:
                response = await handler(request)
            except Exception:
                log.exception("unhandled error on %s", scope["path"])
                response = error_response(internal_error())
            if isinstance(response, ExchangeRunner):
                exchange.on_cut = functools.partial(_cut_by_drain, response)
            await response(scope, receive, send)
        except asyncio.CancelledError:
            if not exchange.cut:
                raise
            exchange.task.uncancel()  # the drain's cut, answered here rather than a silent close
            await exchange.end_cut(shutting_down(gw.config.drain.retry_after_s))
        finally:
            gw.inflight.leave(exchange)


def _cut_by_drain(runner: ExchangeRunner) -> None:
    """What the access log says of an exchange the drain ends."""
    runner.status, runner.error = 503, "ended by the drain: the process was shutting down"


def create_app(gw: Gateway) -> FastAPI:
    """The ASGI app around `gw`: its routes, and its startup and shutdown as the app's lifespan."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await gw.startup()
        try:
            yield
        finally:
            await gw.shutdown()

    # FastAPI's own /openapi.json and docs pages are off: the document is served by
    # gateway/openai/api_routes.py (with the generating routes added), the docs pages would
    # load their scripts from a CDN.
    app = FastAPI(
        title="Switchyard",
        version=gateway_version(),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    app.state.gateway = gw
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        app.add_route(path, gw.api[path], methods=["POST"])
    stored = gw.responses_api
    # Declared to FastAPI with their shapes: GET /openapi.json documents them.
    mount_documented(
        app,
        {
            "list_models": gw.list_models,
            "get_model": gw.get_model,
            "embeddings": gw.api["/v1/embeddings"],
            "tokenize": gw.api["/tokenize"],
            "detokenize": gw.api["/detokenize"],
            "retrieve_response": stored.retrieve,
            "delete_response": stored.delete,
            "response_input_items": stored.input_items,
            "healthz": gw.ops.healthz,
            # The process's readiness only, when the detail is served on the ops listener.
            "readyz": gw.ops.readyz if gw.config.ops.listen is None else gw.ops.readiness,
        },
    )
    app.add_route("/openapi.json", openapi_route(app), methods=["GET"])
    if gw.config.ops.listen is None:
        app.add_route("/metrics", gw.metrics_view, methods=["GET"])
        app.add_route("/admin/reload", gw.admin.reload, methods=["POST"])
        app.add_route("/admin/config", gw.admin.show_config, methods=["GET"])
        for path, endpoint, methods in gw.rollout_admin.routes():
            app.add_route(path, endpoint, methods=methods)
    app.add_exception_handler(
        StarletteHTTPException,
        route_error_handler(
            "/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/models, "
            "/tokenize and /detokenize"
        ),
    )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(internal_error())

    return app


def ops_app(gw: Gateway) -> Starlette:
    """What the ops listener serves (gateway/observe/ops.py)."""
    routes = [
        Route("/healthz", gw.ops.healthz, methods=["GET"]),
        Route("/readyz", gw.ops.readyz, methods=["GET"]),
        Route("/metrics", gw.metrics_view, methods=["GET"]),
        Route("/admin/reload", gw.admin.reload, methods=["POST"]),
        Route("/admin/config", gw.admin.show_config, methods=["GET"]),
        *(Route(path, endpoint, methods=methods) for path, endpoint, methods in gw.rollout_admin.routes()),
    ]
    handler = route_error_handler("/healthz, /readyz, /metrics and /admin/* (the ops listener)")
    return Starlette(routes=routes, exception_handlers={StarletteHTTPException: handler})
