"""gateway/observe/metrics.py as a scrape reads it: each of the gateway's families named,
typed, described and labelled as docs/operations.md lists them, the histograms' buckets;
and the access log: one JSON line per record on stdout through the redaction rule, its
handler made once."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.observe.lean_metrics import LeanHistogram
from gateway.observe.log_lines import SafeLines
from gateway.observe.metrics import (
    ITL_BUCKETS,
    LATENCY_BUCKETS,
    OVERHEAD_BUCKETS,
    GatewayMetrics,
    access_logger,
    log_access,
)

# name (a counter's without _total) -> (type, help, labels)
FAMILIES = {
    "switchyard_requests": (
        "counter",
        "Requests by model, backend, HTTP status and rollout track.",
        ("model", "backend", "status", "track"),
    ),
    "switchyard_request_duration_seconds": ("histogram", "End-to-end request latency.", ("model",)),
    "switchyard_time_to_first_token_seconds": (
        "histogram",
        "Time from request arrival to the first content-bearing event.",
        ("model", "backend", "track"),
    ),
    "switchyard_inter_token_latency_seconds": (
        "histogram",
        "Gaps between content events in a stream.",
        ("model", "track"),
    ),
    "switchyard_prompt_tokens": ("counter", "Prompt tokens.", ("model",)),
    "switchyard_completion_tokens": ("counter", "Completion tokens.", ("model",)),
    "switchyard_inflight_requests": ("gauge", "Requests being served now.", ("model",)),
    "switchyard_gateway_overhead_seconds": (
        "histogram",
        "Time the gateway itself spent on a request: arrival to end, less the admission-queue wait, the retry backoff and every wait for the backend (its first event included). Requests served by an in-process engine (adapter native) are not observed: its compute shares the process.",
        ("model",),
    ),
    "switchyard_client_cancellations": (
        "counter",
        "Requests whose client went away, by the phase it happened in.",
        ("phase",),
    ),
    "switchyard_backend_healthy": ("gauge", "1 when the backend's last health check passed.", ("backend",)),
    "switchyard_backend_inflight": ("gauge", "Generations (choices) in flight per backend.", ("backend",)),
    "switchyard_backend_prefill_backlog_tokens": (
        "gauge",
        "Estimated uncached prompt tokens of the requests sent to a backend whose first event has not come back (what the backlog routing scorer reads).",
        ("backend",),
    ),
    "switchyard_backend_failures": (
        "counter",
        "Upstream attempts that failed before their first event, by backend and error code (backend_busy: no free connection within pool_wait_s; upstream_timeout).",
        ("backend", "code"),
    ),
    "switchyard_tenant_requests": (
        "counter",
        "Requests by tenant, model and HTTP status.",
        ("tenant", "model", "status"),
    ),
    "switchyard_tenant_tokens": (
        "counter",
        "Tokens by tenant and model; direction: input (prompt) or output (completion).",
        ("tenant", "model", "direction"),
    ),
    "switchyard_tenant_rejections": (
        "counter",
        "Requests refused before any work, by tenant and reason (auth, rate_limited, concurrency, quota, quota_store_unavailable, queue_full, queue_timeout).",
        ("tenant", "reason"),
    ),
    "switchyard_rollout_fallbacks": (
        "counter",
        "Requests of a model under rollout served by the other track because their own had no serving backend, by the track they were assigned.",
        ("model", "track"),
    ),
    "switchyard_rollout_mirror_copies": (
        "counter",
        "Stable requests copied to the candidate, by result: compared, dropped (max_inflight copies already running, or no candidate serving), cancelled (the original's client left, or a drain).",
        ("model", "result"),
    ),
}
BUCKETS = {
    "switchyard_request_duration_seconds": LATENCY_BUCKETS,
    "switchyard_time_to_first_token_seconds": LATENCY_BUCKETS,
    "switchyard_inter_token_latency_seconds": ITL_BUCKETS,
    "switchyard_gateway_overhead_seconds": OVERHEAD_BUCKETS,
}


def test_each_family_is_named_typed_described_and_labelled():
    metrics = GatewayMetrics()
    for family in vars(metrics).values():
        if family is not metrics.registry:
            child = family.labels(*(f"v{i}" for i in range(len(family.labelnames))))
            child.observe(0.0) if isinstance(family, LeanHistogram) else child.inc()
    seen = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        if family.name.endswith("_created"):
            continue
        (sample,) = [s for s in family.samples if not s.name.endswith(("_created", "_bucket", "_sum"))]
        labels = tuple(sorted(sample.labels, key=sample.labels.get))  # in order: the values are v0, v1, ...
        seen[family.name] = (family.type, family.documentation, labels)
        if family.type == "histogram":
            bounds = [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")]
            assert bounds == [*BUCKETS[family.name], float("inf")], family.name
    assert seen == {name: (kind, text, tuple(labels)) for name, (kind, text, labels) in FAMILIES.items()}
    assert set(BUCKETS) == {name for name, (kind, _, _) in FAMILIES.items() if kind == "histogram"}


@pytest.fixture
def fresh_access_logger():
    log = logging.getLogger("switchyard.access")
    kept = (list(log.handlers), log.propagate, log.level)
    for handler in kept[0]:
        log.removeHandler(handler)
    yield log
    for handler in list(log.handlers):
        log.removeHandler(handler)
    for handler in kept[0]:
        log.addHandler(handler)
    log.propagate, log.level = kept[1], kept[2]


def test_the_access_log_is_one_json_line_per_record_on_stdout(fresh_access_logger, capsys):
    # pytest's capture handlers can sit on this logger too (after a served app's run): none for this test
    for handler in list(fresh_access_logger.handlers):
        fresh_access_logger.removeHandler(handler)
    log = access_logger()
    assert log is fresh_access_logger and access_logger() is log
    (handler,) = log.handlers
    assert [type(f) for f in handler.filters] == [SafeLines]
    assert log.level == logging.INFO and log.propagate is False
    log_access(log, {"model": "m", "status": 200, "note": "password=pw"})
    out = capsys.readouterr()
    assert out.err == ""
    assert json.loads(out.out) == {"model": "m", "status": 200, "note": "password=***"}
    assert out.out.count("\n") == 1 and out.out.startswith("{")
