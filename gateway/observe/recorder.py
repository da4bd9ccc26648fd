"""What one request did, and the one place that writes it down: the request
metrics (Prometheus, per model and per tenant, per track for a model under rollout),
the request's trace, the JSON access-log line (a client's names clipped and the error
message redacted by policies/redact.py, so that a line stays short and shows no
secret), and for a model under rollout its `TrackRecord`, handed to the rollout sink."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container

from gateway.config.schema import GatewayConfig
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.lean_metrics import HistogramChild
from gateway.observe.metrics import GatewayMetrics, log_access
from policies.redact import clip, public_message
from policies.rollout_records import RolloutSink

# The tenant label of every tenant the config does not name (a JWT's tenant when no
# tenants are configured, the anonymous tenant, a request that never authenticated).
OTHER_TENANT = "other"
# Error codes of the refusals counted per tenant, by reason (a 401 is always "auth").
REJECTION_REASONS = {
    "unknown_tenant": "auth",
    "model_not_allowed": "auth",
    "rate_limit_exceeded": "rate_limited",
    "concurrency_limit_exceeded": "concurrency",
    "request_exceeds_concurrency_limit": "concurrency",
    "quota_zero": "quota",
    "request_exceeds_tpm_limit": "quota",
    "quota_store_unavailable": "quota_store_unavailable",
    "queue_full": "queue_full",
    "queue_timeout": "queue_timeout",
}


def rejection_reason(outcome: Outcome) -> str | None:
    """Why the gateway refused a request before any work, as the tenant metrics say
    it; None for anything else (a client's mistake, an upstream failure)."""
    if outcome.admitted:
        return None
    if outcome.status == 401:
        return "auth"
    return REJECTION_REASONS.get(outcome.code or "")


class TenantLabels:
    """The tenant label: a tenant the config names (under `tenants`, or by an API key
    of `auth.api_keys`), else OTHER_TENANT, so that the label's values stay as few as
    the config's tenants whatever tenants JWTs name."""

    def __init__(self, configured: Container[str]) -> None:
        self.configured = configured

    @classmethod
    def of(cls, config: GatewayConfig) -> TenantLabels:
        return cls(frozenset(config.tenants) | {key.tenant for key in config.auth.api_keys})

    def label(self, tenant: str | None) -> str:
        return tenant if tenant is not None and tenant in self.configured else OTHER_TENANT


class _Series:
    """The metric children one kind of finished request writes (`RequestRecorder.finish`),
    looked up together once per label set instead of one by one per request. The
    overhead histogram's is looked up at its first observation: a child asked for is
    exposed, and a model whose requests never went upstream shows no overhead series."""

    __slots__ = ("completion", "e2e", "overhead", "prompt", "requests", "tenant_requests", "tokens_in", "tokens_out")

    def __init__(self, m: GatewayMetrics, key: tuple) -> None:
        mlabel, known_model, backend, status, served, tenant, usage = key
        self.requests = m.requests.labels(mlabel, backend, str(status), served)
        self.tenant_requests = m.tenant_requests.labels(tenant, mlabel, str(status))
        if usage:
            self.tokens_in = m.tenant_tokens.labels(tenant, mlabel, "input")
            self.tokens_out = m.tenant_tokens.labels(tenant, mlabel, "output")
        if known_model:
            self.e2e = m.e2e.labels(mlabel)
            if usage:
                self.prompt = m.prompt_tokens.labels(mlabel)
                self.completion = m.completion_tokens.labels(mlabel)
        self.overhead: HistogramChild | None = None


class RequestRecorder:
    """Request metrics, traces and the access log. `known_models` keeps the model
    label's values to the configured models (a tenant's typo is counted as "-"),
    `tenants` the tenant label's to the configured tenants. `in_process` says which
    backends run in this process (the native engine): their requests are left out of
    the gateway-overhead histogram, since the engine's compute shares the process
    (threads, GIL, event loop) and the gateway's own time cannot be told apart from it."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        known_models: Container[str],
        access_log: logging.Logger | None,
        tenants: TenantLabels | None = None,
        in_process: Callable[[str], bool] = lambda backend: False,
        rollouts: RolloutSink | None = None,
    ) -> None:
        self.metrics = metrics
        self.known_models = known_models
        self.access_log = access_log
        self.tenants = tenants or TenantLabels(frozenset())
        self.in_process = in_process
        self.rollouts = rollouts  # where a model under rollout's records go
        self._series: dict[tuple, _Series] = {}

    def inflight(self, model: str):
        """The in-flight gauge of `model` (inc when a generation starts, dec when it ends)."""
        return self.metrics.inflight.labels(model)

    def first_token(self, model: str, backend: str, ttft: float, track: str = "") -> None:
        m = self.metrics
        m.ttft.labels(model, backend, track).observe(ttft)

    def inter_token(self, model: str, track: str = ""):
        """The inter-token histogram of `model` on `track`: a generation looks it up once
        (at its first token) and observes each later gap on it."""
        m = self.metrics
        return m.itl.labels(model, track)

    def finish(self, ctx: RequestContext, outcome: Outcome) -> None:
        elapsed = time.perf_counter() - ctx.started
        model = ctx.model or "-"
        known_model = model in self.known_models
        mlabel = model if known_model else "-"
        usage, backend, phase = outcome.usage, outcome.backend, outcome.cancelled_phase
        m = self.metrics
        tenant = self.tenants.label(ctx.tenant)
        rollout = outcome.rollout
        key = (
            mlabel,
            known_model,
            backend or "-",
            outcome.status,
            rollout.served if rollout else "",
            tenant,
            usage is not None,
        )
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(m, key)
        series.requests.inc()
        series.tenant_requests.inc()
        if usage is not None:
            series.tokens_in.inc(usage.prompt_tokens)
            series.tokens_out.inc(usage.completion_tokens)
        if not outcome.admitted:
            reason = rejection_reason(outcome)
            if reason is not None:
                m.tenant_rejections.labels(tenant, reason).inc()
        if known_model:
            series.e2e.observe(elapsed)
            if (ctx.upstream_wait or backend) and not (backend and self.in_process(backend)):
                waited = ctx.upstream_wait + ctx.queue_wait + ctx.backoff_wait
                if series.overhead is None:
                    series.overhead = m.overhead.labels(mlabel)
                series.overhead.observe(max(0.0, elapsed - waited))
            if usage is not None:
                series.prompt.inc(usage.prompt_tokens)
                series.completion.inc(usage.completion_tokens)
        if phase is not None:
            m.cancelled.labels(phase.value).inc()
        if rollout is not None:
            if rollout.fell_back:
                m.rollout_fallbacks.labels(mlabel, rollout.assigned).inc()
            track_record = rollout.record(outcome.status, outcome.failure, usage, ctx.ttft, left=phase is not None)
            if track_record is not None and self.rollouts is not None:
                self.rollouts.record(model, track_record)
        ctx.trace.finish(ctx, outcome)
        if self.access_log is None:
            return
        record = {
            "ts": round(time.time(), 3),
            "request_id": ctx.request_id,
            "upstream_id": ctx.upstream_id,
            "tenant": ctx.tenant if ctx.tenant is None else clip(ctx.tenant),
            "model": ctx.model if known_model or ctx.model is None else clip(ctx.model),
            "backend": backend,
            "status": outcome.status,
            "latency_ms": round(elapsed * 1000, 3),
            "stream": ctx.stream,
            "config_version": ctx.config_version,
        }
        if usage is not None:
            record["prompt_tokens"] = usage.prompt_tokens
            record["completion_tokens"] = usage.completion_tokens
        if ctx.ttft is not None:
            record["ttft_ms"] = round(ctx.ttft * 1000, 3)
        if outcome.error:
            record["error"] = public_message(outcome.error)
        if phase is not None:
            record["cancelled_phase"] = phase.value
        if outcome.dropped_params:
            record["dropped_params"] = list(outcome.dropped_params)
        if rollout is not None:
            record["track"] = rollout.served
        log_access(self.access_log, record)
