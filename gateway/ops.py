"""The operational endpoints: liveness, readiness and metrics.

Readiness is this process's: started, its config loaded, not draining. It is not
gated on backend health: every replica shares the same backends, so a model
without a healthy backend would take every replica out of its Service at once,
the models that still work included. Per-model health is reported instead: in
the body of `/readyz`, as `GET /readyz?model=M` (503 for a model none of whose
backends is healthy, for a probe that should follow one model), and as
`switchyard_model_ready{model}`.

Where the views are served (gateway/config_exposure.py `ops_exposure_refusal` decides what
a config may do): without an ops listener, `/metrics` and the detailed `/readyz`
are on the main listener; with one, they are there, and the main listener keeps
only `/healthz` and `/readyz` with the process's readiness and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.requests import Request
from starlette.responses import Response

from adapters.errors import model_not_found
from gateway.backends import BackendSet
from gateway.metrics import GatewayMetrics
from gateway.responses import error_response, json_response
from policies.auth import ApiKeyTable


@dataclass(frozen=True, slots=True)
class ModelHealth:
    ready: bool  # at least one backend's last health check passed
    backends: list[dict]


def model_health(backends: BackendSet) -> dict[str, ModelHealth]:
    return {
        name: ModelHealth(
            any(b.health.ok for b in pool.backends),
            [{"backend": b.name, "healthy": b.health.ok, "detail": b.health.detail} for b in pool.backends],
        )
        for name, pool in backends.pools.items()
    }


class OpsViews:
    """The handlers; `ready` is the process's readiness (`Gateway.ready`)."""

    def __init__(self, backends: BackendSet, metrics: GatewayMetrics, ready: Callable[[], bool]) -> None:
        self.backends = backends
        self.metrics = metrics
        self.ready = ready

    async def healthz(self, request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readiness(self, request: Request) -> Response:
        """The process's readiness only: what the main listener answers when the
        detail is served on the ops listener."""
        ready = self.ready()
        return json_response({"status": "ready" if ready else "not_ready"}, 200 if ready else 503)

    async def readyz(self, request: Request) -> Response:
        ready = self.ready()
        health = model_health(self.backends)
        model = request.query_params.get("model")
        if model is not None:
            one = health.get(model)
            if one is None:
                return error_response(model_not_found(model))
            ok = ready and one.ready
            body = {"status": "ready" if ok else "not_ready", "model": model, "backends": one.backends}
            return json_response(body, 200 if ok else 503)
        models = {name: {"ready": h.ready, "backends": h.backends} for name, h in health.items()}
        return json_response({"status": "ready" if ready else "not_ready", "models": models}, 200 if ready else 503)

    def metrics_text(self) -> bytes:
        """This process's exposition (gateway/worker_metrics.py merges several workers')."""
        for b in self.backends.backends.values():
            self.metrics.backend_healthy.labels(b.name).set(1 if b.health.ok else 0)
            self.metrics.backend_inflight.labels(b.name).set(b.inflight)
        return generate_latest(self.metrics.registry)

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics_text(), media_type=CONTENT_TYPE_LATEST)


class OpsCollector:
    """Read at scrape time: each model's readiness, and the key file's reload errors."""

    def __init__(self, backends: BackendSet, keys: Callable[[], ApiKeyTable]) -> None:
        self.backends = backends
        self.keys = keys  # the key table in force (a config reload replaces it)

    def collect(self):
        ready = GaugeMetricFamily(
            "switchyard_model_ready", "1 when at least one backend of the model is healthy.", labels=["model"]
        )
        for name, health in model_health(self.backends).items():
            ready.add_metric([name], 1 if health.ready else 0)
        yield ready
        errors = CounterMetricFamily(
            "switchyard_auth_keys_reload_errors",
            "Versions of auth.api_keys_file that could not be used (the last good key set stayed in force).",
        )
        errors.add_metric([], self.keys().reload_errors)
        yield errors

    def describe(self):
        return []
