"""The operational endpoints: liveness, readiness and metrics.

Readiness is this process's (started, config loaded, not draining), never its backends'
health: every replica shares them, so gating on them would take every replica out at
once. Each model's health is reported beside it (the `/readyz` body, `/readyz?model=M`,
`switchyard_model_ready`). Where each view is served: docs/architecture.md, "Readiness
and the operational views".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.requests import Request
from starlette.responses import Response

from adapters.errors import model_not_found
from adapters.native_work import TextWork
from gateway.backends.backend import Backend
from gateway.backends.backend_set import BackendSet
from gateway.http.envelope import error_response, json_response
from gateway.observe.metrics import GatewayMetrics
from policies.auth import ApiKeyTable
from policies.ejection import CircuitState
from policies.redact import redact_text


@dataclass(frozen=True, slots=True)
class ModelHealth:
    ready: bool  # at least one backend's last health check passed
    backends: list[dict]


def model_health(backends: BackendSet) -> dict[str, ModelHealth]:
    return {
        name: ModelHealth(
            any(b.health.ok for b in pool.backends),
            [
                {
                    "backend": b.name,
                    "healthy": b.health.ok,
                    "detail": redact_text(b.health.detail) if b.health.detail else b.health.detail,
                    **pool.ejection.describe(b.name),
                }
                for b in pool.backends
            ],
        )
        for name, pool in backends.pools.items()
    }


class OpsViews:
    """The handlers; `ready` is the process's readiness (`Gateway.ready`)."""

    def __init__(
        self,
        backends: BackendSet,
        metrics: GatewayMetrics,
        ready: Callable[[], bool],
        retired: Callable[[], list[Backend]] = list,
    ) -> None:
        self.backends = backends
        self.metrics = metrics
        self.ready = ready
        self.retired = retired  # backends a reload took out, still open for their requests
        self._shown: set[str] = set()  # every backend name given a series so far

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
        """This process's exposition (gateway/observe/worker_metrics.py merges several workers').
        A backend a reload took out keeps its series: not healthy (0), its in-flight
        requests until the last ends, then 0; a series never vanishes mid-watch."""
        m, in_force = self.metrics, self.backends.backends
        for b in in_force.values():
            m.backend_healthy.labels(b.name).set(1 if b.health.ok else 0)
            m.backend_inflight.labels(b.name).set(b.inflight)
            m.backend_backlog.labels(b.name).set(b.backlog)
        leaving = [b for b in self.retired() if b.name not in in_force]
        for name in self._shown - in_force.keys():
            m.backend_healthy.labels(name).set(0)
            m.backend_inflight.labels(name).set(sum(b.inflight for b in leaving if b.name == name))
            m.backend_backlog.labels(name).set(sum(b.backlog for b in leaving if b.name == name))
        self._shown |= in_force.keys()
        return generate_latest(m.registry)

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
        yield from self._ejections()
        yield from self._kv_events()
        errors = CounterMetricFamily(
            "switchyard_auth_keys_reload_errors",
            "Versions of auth.api_keys_file that could not be used (the last good key set stayed in force).",
        )
        errors.add_metric([], self.keys().reload_errors)
        yield errors

    def _ejections(self):
        """Each pool's circuits (policies/ejection.py) and retry budget (policies/retry_budget.py).
        A reload that changes a pool starts them afresh: the counters reset with it."""
        ejected = GaugeMetricFamily(
            "switchyard_backend_ejected",
            "1 while the outlier detector holds the backend out of the model's pool (open or half-open circuit).",
            labels=["model", "backend"],
        )
        ejections = CounterMetricFamily(
            "switchyard_backend_ejections",
            "Ejections of a backend from a model's pool, by reason (consecutive_failures, error_rate, probe_failed).",
            labels=["model", "backend", "reason"],
        )
        refused = CounterMetricFamily(
            "switchyard_retry_budget_exhausted",
            "Failovers not made because the model's retry budget was spent (the client got the error).",
            labels=["model"],
        )
        for name, pool in self.backends.pools.items():
            for b in pool.backends:
                closed = pool.ejection.state(b.name) is CircuitState.CLOSED
                ejected.add_metric([name, b.name], 0 if closed else 1)
                for reason, count in pool.ejection.ejections(b.name).items():
                    ejections.add_metric([name, b.name, reason], count)
            refused.add_metric([name], pool.retry_budget.refused)
        yield ejected
        yield ejections
        yield refused

    def _kv_events(self):
        """Each backend's KV-event feed (gateway/backends/kv_feeds.py): what precise routing knows
        and how it heard it. Feeds shared by backends (one native engine) show under each."""
        blocks = GaugeMetricFamily(
            "switchyard_kv_index_blocks", "Blocks the backend's KV-event index holds.", labels=["backend"]
        )
        batches = CounterMetricFamily(
            "switchyard_kv_events_batches",
            "KV-event batches received from the runtime's publisher (ZMQ), replayed ones included.",
            labels=["backend"],
        )
        lost = CounterMetricFamily(
            "switchyard_kv_events_lost",
            "What the KV-event feed could not trust, by kind: gap (sequence numbers skipped), restart "
            "(the numbers started again), reconnect (the connection to the publisher was made again: "
            "the index started over), undecodable (a batch not understood), replay_failed.",
            labels=["backend", "kind"],
        )
        for name, feed in sorted(self.backends.feeds.items()):
            blocks.add_metric([name], len(feed.index))
            lost.add_metric([name, "gap"], feed.index.gaps)
            lost.add_metric([name, "restart"], feed.index.restarts)
            lost.add_metric([name, "reconnect"], feed.index.reconnects)
            if feed.subscriber is not None:
                stats = feed.subscriber.stats
                batches.add_metric([name], stats.batches + stats.replayed_batches)
                lost.add_metric([name, "undecodable"], stats.undecodable)
                lost.add_metric([name, "replay_failed"], stats.replay_failures)
        yield blocks
        yield batches
        yield lost

    def describe(self):
        return []


class TextWorkCollector:
    """Read at scrape time: the native engine's text-work pool (adapters/native_work.py,
    one per process, shared by its native backends): pieces waiting and running, and the
    calls it refused because a tenant's or the pool's queue was full."""

    def __init__(self, work: TextWork) -> None:
        self.work = work

    def collect(self):
        waiting = GaugeMetricFamily(
            "switchyard_native_text_work_waiting",
            "Chat-template, tokenize and detokenize pieces of the native engine's backends waiting for a worker.",
        )
        waiting.add_metric([], self.work.waiting())
        running = GaugeMetricFamily(
            "switchyard_native_text_work_running",
            "Pieces of the native engine's text work running on its worker threads now.",
        )
        running.add_metric([], self.work.running)
        refused = CounterMetricFamily(
            "switchyard_native_text_work_refused",
            "Calls refused 429 tokenizer_busy: the tenant's or the pool's queue of text work was full.",
        )
        refused.add_metric([], self.work.refused)
        yield waiting
        yield running
        yield refused

    def describe(self):
        return []
