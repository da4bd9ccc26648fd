"""Prometheus metrics and the structured access log.

The gateway keeps its own registry (not the process-global one) so that several
apps in one test process do not collide, and so that the native engine's metrics
can be registered beside the gateway's. The metrics are defined here; their values
are held by gateway/observe/lean_metrics.py (event-loop writers only, as that module says).
"""

from __future__ import annotations

import logging
import sys
from functools import partial

import orjson
from prometheus_client import CollectorRegistry

from gateway.observe.lean_metrics import LeanCounter, LeanGauge, LeanHistogram
from gateway.observe.log_lines import SafeLines

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


def registered(
    registry: CollectorRegistry,
) -> tuple[partial[LeanCounter], partial[LeanGauge], partial[LeanHistogram]]:
    """Counter, Gauge and Histogram bound to `registry`: each of the gateway's metrics
    is registered there, never in the process-global registry. `metric.labels(...)` is
    one dict lookup once its label set was seen, so the request path calls it per update."""
    return (
        partial(LeanCounter, registry=registry),
        partial(LeanGauge, registry=registry),
        partial(LeanHistogram, registry=registry),
    )


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        counter, gauge, histogram = registered(self.registry)
        # `track`: stable or candidate for a model under rollout (gateway/config/rollout.py), else empty.
        self.requests = counter(
            "switchyard_requests_total",
            "Requests by model, backend, HTTP status and rollout track.",
            ["model", "backend", "status", "track"],
        )
        self.e2e = histogram(
            "switchyard_request_duration_seconds", "End-to-end request latency.", ["model"], buckets=LATENCY_BUCKETS
        )
        self.ttft = histogram(
            "switchyard_time_to_first_token_seconds",
            "Time from request arrival to the first content-bearing event.",
            ["model", "backend", "track"],
            buckets=LATENCY_BUCKETS,
        )
        self.itl = histogram(
            "switchyard_inter_token_latency_seconds",
            "Gaps between content events in a stream.",
            ["model", "track"],
            buckets=ITL_BUCKETS,
        )
        self.prompt_tokens = counter("switchyard_prompt_tokens_total", "Prompt tokens.", ["model"])
        self.completion_tokens = counter("switchyard_completion_tokens_total", "Completion tokens.", ["model"])
        self.inflight = gauge("switchyard_inflight_requests", "Requests being served now.", ["model"])
        self.overhead = histogram(
            "switchyard_gateway_overhead_seconds",
            "Time the gateway itself spent on a request: arrival to end, less the admission-queue wait, "
            "the retry backoff and every wait for the backend (its first event included). Requests served "
            "by an in-process engine (adapter native) are not observed: its compute shares the process.",
            ["model"],
            buckets=OVERHEAD_BUCKETS,
        )
        self.cancelled = counter(
            "switchyard_client_cancellations_total",
            "Requests whose client went away, by the phase it happened in.",
            ["phase"],
        )
        self.backend_healthy = gauge(
            "switchyard_backend_healthy", "1 when the backend's last health check passed.", ["backend"]
        )
        self.backend_inflight = gauge(
            "switchyard_backend_inflight", "Generations (choices) in flight per backend.", ["backend"]
        )
        self.backend_backlog = gauge(
            "switchyard_backend_prefill_backlog_tokens",
            "Estimated uncached prompt tokens of the requests sent to a backend whose first event has "
            "not come back (what the backlog routing scorer reads).",
            ["backend"],
        )
        self.backend_failures = counter(
            "switchyard_backend_failures_total",
            "Upstream attempts that failed before their first event, by backend and error code "
            "(backend_busy: no free connection within pool_wait_s; upstream_timeout).",
            ["backend", "code"],
        )
        # Per tenant: the tenant label is a configured tenant's name or OTHER_TENANT
        # (gateway/observe/recorder.py `TenantLabels`), so the series stay as few as the config's.
        self.tenant_requests = counter(
            "switchyard_tenant_requests_total",
            "Requests by tenant, model and HTTP status.",
            ["tenant", "model", "status"],
        )
        self.tenant_tokens = counter(
            "switchyard_tenant_tokens_total",
            "Tokens by tenant and model; direction: input (prompt) or output (completion).",
            ["tenant", "model", "direction"],
        )
        self.tenant_rejections = counter(
            "switchyard_tenant_rejections_total",
            "Requests refused before any work, by tenant and reason "
            "(auth, rate_limited, concurrency, quota, quota_store_unavailable, queue_full, queue_timeout).",
            ["tenant", "reason"],
        )
        # Rollouts' request path (gateway/serving/rollout.py, mirror.py).
        self.rollout_fallbacks = counter(
            "switchyard_rollout_fallbacks_total",
            "Requests of a model under rollout served by the other track because their own had no "
            "serving backend, by the track they were assigned.",
            ["model", "track"],
        )
        self.mirror_copies = counter(
            "switchyard_rollout_mirror_copies_total",
            "Stable requests copied to the candidate, by result: compared, dropped (max_inflight copies "
            "already running, or no candidate serving), cancelled (the original's client left, or a drain).",
            ["model", "result"],
        )


def access_logger() -> logging.Logger:
    log = logging.getLogger("switchyard.access")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.addFilter(SafeLines())
        log.addHandler(handler)
        log.propagate = False
        log.setLevel(logging.INFO)
    return log


def log_access(log: logging.Logger, record: dict) -> None:
    log.info(orjson.dumps(record).decode())
