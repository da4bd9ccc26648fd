"""gateway/observe/recorder.py on its own: what one finished request writes down (the request
and token series per model, track and tenant, the overhead histogram and who it leaves out,
the cancellations, a rollout's fallback and record), the JSON access-log line field by field,
and the labels of a first token and of the inter-token gaps."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from adapters.base import Usage
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.recorder import RequestRecorder, TenantLabels, rejection_reason
from gateway.serving.phases import CancelPhase


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(record.getMessage()))


@pytest.fixture
def access():
    log = logging.getLogger("test_recorder.access")
    lines = Lines()
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log, lines.lines
    log.removeHandler(lines)


class Sink:
    def __init__(self) -> None:
        self.records: list[tuple] = []

    def record(self, model, record) -> None:
        self.records.append((model, record))


def recorder(access_log=None, **kw) -> tuple[RequestRecorder, GatewayMetrics]:
    metrics = GatewayMetrics()
    tenants = TenantLabels(frozenset({"acme"}))
    return RequestRecorder(metrics, {"m"}, access_log, tenants, **kw), metrics


def value(metrics: GatewayMetrics, name: str, **labels) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def ctx(model="m", tenant="acme", **kw) -> RequestContext:
    c = RequestContext("req-1", 0.0, "chat", upstream_id="up-1", config_version="1-abc", model=model, tenant=tenant)
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def test_a_served_request_counts_its_request_and_tokens_per_model_and_tenant(access, monkeypatch):
    log, lines = access
    rec, m = recorder(log)
    monkeypatch.setattr("time.perf_counter", lambda: 2.2345678)
    monkeypatch.setattr("time.time", lambda: 1700000000.12345)
    rec.finish(ctx(stream=True, ttft=0.1234567, started=1.0), Outcome(200, usage=Usage(7, 3), backend="b1"))
    labels = {"model": "m", "backend": "b1", "status": "200", "track": ""}
    assert value(m, "switchyard_requests_total", **labels) == 1
    assert value(m, "switchyard_tenant_requests_total", tenant="acme", model="m", status="200") == 1
    assert value(m, "switchyard_tenant_tokens_total", tenant="acme", model="m", direction="input") == 7
    assert value(m, "switchyard_tenant_tokens_total", tenant="acme", model="m", direction="output") == 3
    assert value(m, "switchyard_prompt_tokens_total", model="m") == 7
    assert value(m, "switchyard_completion_tokens_total", model="m") == 3
    assert value(m, "switchyard_request_duration_seconds_sum", model="m") == pytest.approx(1.2345678)
    assert lines == [
        {
            "ts": 1700000000.123,
            "request_id": "req-1",
            "upstream_id": "up-1",
            "tenant": "acme",
            "model": "m",
            "backend": "b1",
            "status": 200,
            "latency_ms": 1234.568,
            "stream": True,
            "config_version": "1-abc",
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "ttft_ms": 123.457,
        }
    ]
    # The same kind of request again: the same series, counted twice.
    rec.finish(ctx(stream=True), Outcome(200, usage=Usage(1, 1), backend="b1"))
    assert value(m, "switchyard_requests_total", **labels) == 2
    assert value(m, "switchyard_prompt_tokens_total", model="m") == 8


def test_an_unknown_model_counts_as_dash_and_its_name_is_clipped_in_the_log(access):
    log, lines = access
    rec, m = recorder(log)
    long = "x" * 300
    rec.finish(ctx(model=long, tenant="t" * 300), Outcome(404, error="no such model", code="model_not_found"))
    rec.finish(ctx(model=None, tenant=None), Outcome(400, error="bad"))
    assert value(m, "switchyard_requests_total", model="-", backend="-", status="404", track="") == 1
    assert value(m, "switchyard_requests_total", model="-", backend="-", status="400", track="") == 1
    assert value(m, "switchyard_tenant_requests_total", tenant="other", model="-", status="404") == 1
    assert value(m, "switchyard_request_duration_seconds_count", model="-") is None
    first, second = lines
    assert first["model"] == "x" * 256 + "...(300 characters)" and first["tenant"] == "t" * 256 + "...(300 characters)"
    assert first["error"] == "no such model" and "prompt_tokens" not in first and "ttft_ms" not in first
    assert second["model"] is None and second["tenant"] is None and second["backend"] is None


def test_a_known_models_name_is_logged_whole_and_a_secret_in_an_error_is_masked(access):
    log, lines = access
    rec, _ = recorder(log)
    rec.finish(ctx(), Outcome(502, error="upstream said password=pw", backend="b1", dropped_params=("seed", "n")))
    (line,) = lines
    assert line["model"] == "m" and line["error"] == "upstream said password=***"
    assert line["dropped_params"] == ["seed", "n"] and "cancelled_phase" not in line and "track" not in line


def test_the_overhead_is_the_time_not_spent_waiting_and_skips_in_process_backends(monkeypatch):
    monkeypatch.setattr("time.perf_counter", lambda: 10.0)
    rec, m = recorder(in_process=lambda backend: backend == "native")
    waits = {"upstream_wait": 4.0, "queue_wait": 2.0, "backoff_wait": 1.0}
    rec.finish(ctx(**waits), Outcome(200, backend="b1"))
    assert value(m, "switchyard_gateway_overhead_seconds_sum", model="m") == 3.0
    rec.finish(ctx(**waits), Outcome(200, backend="native"))
    assert value(m, "switchyard_gateway_overhead_seconds_count", model="m") == 1
    # Waited upstream without a backend named (a failed attempt): observed, never below 0.
    rec.finish(ctx(upstream_wait=20.0), Outcome(503))
    assert value(m, "switchyard_gateway_overhead_seconds_count", model="m") == 2
    assert value(m, "switchyard_gateway_overhead_seconds_sum", model="m") == 3.0
    # Neither waited upstream nor served by a backend (refused early): no overhead observed.
    rec.finish(ctx(), Outcome(400))
    assert value(m, "switchyard_gateway_overhead_seconds_count", model="m") == 2


def test_a_model_never_sent_upstream_shows_no_overhead_series():
    rec, m = recorder()
    rec.finish(ctx(), Outcome(401, admitted=False))
    assert value(m, "switchyard_gateway_overhead_seconds_count", model="m") is None
    assert value(m, "switchyard_request_duration_seconds_count", model="m") == 1


def test_a_refusal_is_counted_per_tenant_by_reason():
    rec, m = recorder()
    rec.finish(ctx(), Outcome(429, code="rate_limit_exceeded", admitted=False))
    rec.finish(ctx(tenant="nobody"), Outcome(401, code="invalid_api_key", admitted=False))
    rec.finish(ctx(), Outcome(400, code="invalid_request", admitted=False))
    assert value(m, "switchyard_tenant_rejections_total", tenant="acme", reason="rate_limited") == 1
    assert value(m, "switchyard_tenant_rejections_total", tenant="other", reason="auth") == 1
    assert rejection_reason(Outcome(400, admitted=False)) is None
    assert rejection_reason(Outcome(429, code="queue_full", admitted=True)) is None


def test_a_client_leaving_is_counted_by_phase_and_logged(access):
    log, lines = access
    rec, m = recorder(log)
    rec.finish(ctx(), Outcome(499, cancelled_phase=CancelPhase.MID_STREAM, backend="b1"))
    assert value(m, "switchyard_client_cancellations_total", phase="mid_stream") == 1
    assert lines[0]["cancelled_phase"] == "mid_stream"


class Rollout:
    def __init__(self, served: str, assigned: str, fell_back: bool, gives=("record",)) -> None:
        self.served, self.assigned, self.fell_back = served, assigned, fell_back
        self.asked: list[tuple] = []
        self.gives = gives[0]

    def record(self, status, failure, usage, ttft, left):
        self.asked.append((status, failure, usage, ttft, left))
        return self.gives


def test_a_rollouts_request_is_counted_on_its_track_and_its_record_sent_on(access):
    log, lines = access
    sink = Sink()
    rec, m = recorder(log, rollouts=sink)
    usage = Usage(5, 2)
    rollout = Rollout("candidate", "stable", fell_back=True)
    rec.finish(
        ctx(ttft=0.25),
        Outcome(502, usage=usage, backend="b2", rollout=rollout, failure="server", cancelled_phase=CancelPhase.QUEUED),
    )
    assert value(m, "switchyard_requests_total", model="m", backend="b2", status="502", track="candidate") == 1
    assert value(m, "switchyard_rollout_fallbacks_total", model="m", track="stable") == 1
    assert rollout.asked == [(502, "server", usage, 0.25, True)]
    assert sink.records == [("m", "record")] and lines[0]["track"] == "candidate"
    calm = Rollout("stable", "stable", fell_back=False, gives=(None,))
    rec.finish(ctx(), Outcome(200, backend="b1", rollout=calm))
    assert calm.asked == [(200, None, None, None, False)] and len(sink.records) == 1
    assert value(m, "switchyard_rollout_fallbacks_total", model="m", track="stable") == 1
    # No sink: the record is made and dropped.
    bare, _ = recorder()
    bare.finish(ctx(), Outcome(200, backend="b1", rollout=Rollout("stable", "stable", False)))


def test_the_first_token_and_the_gaps_are_labelled_by_model_backend_and_track():
    rec, m = recorder()
    rec.first_token("m", "b1", 0.5)
    rec.first_token("m", "b1", 0.25, "candidate")
    assert value(m, "switchyard_time_to_first_token_seconds_sum", model="m", backend="b1", track="") == 0.5
    assert value(m, "switchyard_time_to_first_token_seconds_sum", model="m", backend="b1", track="candidate") == 0.25
    rec.inter_token("m").observe(0.01)
    rec.inter_token("m", "stable").observe(0.02)
    assert value(m, "switchyard_inter_token_latency_seconds_sum", model="m", track="") == 0.01
    assert value(m, "switchyard_inter_token_latency_seconds_sum", model="m", track="stable") == 0.02
    rec.inflight("m").inc()
    assert value(m, "switchyard_inflight_requests", model="m") == 1


def test_the_trace_is_finished_with_the_request():
    finished = []
    trace = SimpleNamespace(finish=lambda c, o: finished.append((c, o)))
    rec, _ = recorder()
    c, o = ctx(trace=trace), Outcome(200)
    rec.finish(c, o)
    assert finished == [(c, o)]


def test_without_tenants_configured_every_tenant_is_other():
    rec = RequestRecorder(GatewayMetrics(), {"m"}, None)
    rec.finish(ctx(tenant="acme"), Outcome(200, backend="b1"))
    assert (
        rec.metrics.registry.get_sample_value(
            "switchyard_tenant_requests_total", {"tenant": "other", "model": "m", "status": "200"}
        )
        == 1
    )
