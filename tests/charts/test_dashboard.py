"""The Grafana dashboard, the alert rules and the queue-depth autoscaling metric
name only metrics a real gateway exports: checked against the /metrics of a
gateway process started here, after traffic that makes its labelled series
appear (answers, a stream, a quota refusal, a full queue, a client that leaves),
the per-tenant ones included. The alerts cover what docs/operations.md says to
watch, each with a runbook."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.charts.helm import CHART, PRODUCTION_VALUES, render
from tests.charts.promql import Query, dashboard_queries, label_names, metric_names, rule_queries
from tests.procs import keys_auth_config, openai_backend_config, start_gateway, start_upstream

DASHBOARD = json.loads((CHART / "dashboards" / "switchyard.json").read_text())
TENANT_METRICS = {
    "switchyard_tenant_requests_total",
    "switchyard_tenant_tokens_total",
    "switchyard_tenant_rejections_total",
}
# What an operator must hear about (docs/operations.md, "Alerts"): no ready model, the
# quota store down, 5xx by backend, 429 by tenant, TTFT p99 over the SLO, queue
# saturation, gateway overhead, cancellation spikes.
REQUIRED_ALERTS = {
    "SwitchyardModelNotReady",
    "SwitchyardQuotaStoreDown",
    "SwitchyardBackendErrors",
    "SwitchyardTenantThrottled",
    "SwitchyardSlowFirstToken",
    "SwitchyardQueueBacklog",
    "SwitchyardAdmissionRejections",
    "SwitchyardGatewayOverheadHigh",
    "SwitchyardCancellationSpike",
    "SwitchyardConfigReloadRejected",
    "SwitchyardConfigDrift",
    "SwitchyardRolloutRolledBack",
    "SwitchyardRolloutPaused",
}
# Added by Prometheus when it scrapes a target, not by the gateway; `le` is every histogram's.
TARGET_LABELS = {"namespace", "job", "pod", "instance", "service", "container", "endpoint", "le"}


class Exported:
    """Series names and label names of one /metrics scrape."""

    def __init__(self, text: str) -> None:
        self.names: set[str] = set()
        self.labels: dict[str, set[str]] = {}
        for family in text_string_to_metric_families(text):
            suffixes = {
                "counter": ("_total", "_created"),
                "histogram": ("_bucket", "_sum", "_count", "_created"),
                "gauge": ("",),
            }.get(family.type, ("",))
            for suffix in suffixes:
                self.names.add(family.name + suffix)
            for sample in family.samples:
                self.names.add(sample.name)
                self.labels.setdefault(sample.name, set()).update(sample.labels)

    def labels_of(self, names: set[str]) -> set[str] | None:
        """Labels seen on any of `names`, or None when none of them has a sample yet."""
        seen = [self.labels[n] for n in names if n in self.labels]
        return set().union(*seen) if seen else None


@pytest.fixture(scope="module")
def exported(module_tmp) -> Exported:
    upstream = start_upstream(module_tmp, "--chunks", "8", "--itl-ms", "150")
    config = openai_backend_config(upstream)
    # Model "q" has room for one request and no queue: a second concurrent request is turned away.
    config["models"]["q"] = openai_backend_config(upstream, "q", name="up-q", max_inflight=1)["models"]["q"]
    # Model "m" under a rollout (a candidate on the same upstream) with a 1 s window: the
    # switchyard_rollout_* series, and the `track` label, after its first judged window.
    candidate = {**config["models"]["m"]["backends"][0], "name": "up-candidate", "track": "candidate"}
    config["models"]["m"]["backends"].append(candidate)
    config["models"]["m"]["rollout"] = {"steps": [0.5, 1.0], "window_s": 1.0}
    config.update(
        {
            "auth": keys_auth_config({"sk-dash-acme": "acme", "sk-dash-tight": "tight"}),
            "tenants": {"acme": {}, "tight": {"requests_per_minute": 1}},
            "admission": {"max_queue": 0},
        }
    )
    gateway = start_gateway(module_tmp, config)
    try:
        yield Exported(drive_traffic(gateway.url))
    finally:
        gateway.stop()
        upstream.stop()


def drive_traffic(url: str) -> str:
    acme = {"Authorization": "Bearer sk-dash-acme"}
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/v1/chat/completions", json={**body, "model": "m"}, headers=acme).status_code == 200
        stream = {**body, "model": "m", "stream": True}
        with client.stream("POST", "/v1/chat/completions", json=stream, headers=acme) as r:
            assert r.status_code == 200 and "[DONE]" in r.read().decode()
        tight = {"Authorization": "Bearer sk-dash-tight"}
        codes = [
            client.post("/v1/chat/completions", json={**body, "model": "m"}, headers=tight).status_code for _ in "ab"
        ]
        assert codes == [200, 429]
        # Hold model q's only slot with a stream (8 tokens, 1.2 s), be turned away beside
        # it, then leave mid-stream. The line iterator stays referenced: dropping it
        # would close the stream early.
        long_stream = {**body, "model": "q", "stream": True, "max_tokens": 8}
        with client.stream("POST", "/v1/chat/completions", json=long_stream, headers=acme) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            assert client.post("/v1/chat/completions", json={**body, "model": "q"}, headers=acme).status_code == 429
        deadline = time.monotonic() + 15
        while True:
            text = client.get("/metrics").text
            seen = ("switchyard_client_cancellations_total{", "switchyard_rollout_gate_verdict{")
            if all(name in text for name in seen) or time.monotonic() > deadline:
                return text


def test_promql_reader_separates_metrics_from_functions_labels_and_numbers():
    query = Query(
        "t",
        'histogram_quantile(0.95, sum by (model, le) (rate(a_bucket{x="1", y=~"$v"}[$__rate_interval]))) '
        "/ on(model) group_left b_total > 1e3 and absent(c)",
        "{{model}} {{ z }}",
    )
    assert metric_names(query.expr) == {"a_bucket", "b_total", "c"}
    assert label_names(query) == {"model", "le", "x", "y", "z"}


def test_the_scrape_has_samples_for_the_labelled_series(exported):
    for name in (
        "switchyard_requests_total",
        "switchyard_time_to_first_token_seconds_bucket",
        "switchyard_inter_token_latency_seconds_bucket",
        "switchyard_quota_decisions_total",
        "switchyard_admission_rejected_total",
        "switchyard_client_cancellations_total",
        "switchyard_backend_healthy",
        "switchyard_model_ready",
        "switchyard_quota_store_up",
        "switchyard_rollout_state",
        "switchyard_rollout_gate_verdict",
        *TENANT_METRICS,
    ):
        assert name in exported.labels, name


def check_queries(queries: list[Query], exported: Exported) -> None:
    problems = []
    for query in queries:
        names = metric_names(query.expr)
        if not names:
            problems.append(f"{query.where}: names no metric: {query.expr}")
        missing = names - exported.names
        if missing:
            problems.append(f"{query.where}: {sorted(missing)} not exported by the gateway")
        labels = exported.labels_of(names)
        if labels is not None and (unknown := label_names(query) - labels - TARGET_LABELS):
            problems.append(f"{query.where}: labels {sorted(unknown)} not on {sorted(names)}")
    assert not problems, "\n".join(problems)


def test_every_dashboard_query_names_exported_metrics(exported):
    queries = dashboard_queries(DASHBOARD)
    assert len(queries) >= 30
    check_queries(queries, exported)


def test_the_tenants_row_reads_every_per_tenant_metric():
    tenant_rows = [q for q in dashboard_queries(DASHBOARD) if q.row == "Tenants"]
    assert tenant_rows
    for query in tenant_rows:
        assert metric_names(query.expr) <= TENANT_METRICS, query.where
        assert "tenant" in label_names(query), query.where
    assert set().union(*(metric_names(q.expr) for q in tenant_rows)) == TENANT_METRICS


def test_every_alert_rule_names_exported_metrics_and_says_what_to_do(exported):
    rule = render((PRODUCTION_VALUES,)).one("PrometheusRule", "sy-switchyard")
    queries = rule_queries(rule)
    assert REQUIRED_ALERTS <= {q.where.removeprefix("alert ") for q in queries}
    check_queries(queries, exported)
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert alert["labels"]["severity"] in {"critical", "warning", "info"}
            assert alert["annotations"]["summary"] and alert["annotations"]["runbook"]
            assert 'namespace="llm", job="sy-switchyard"' in alert["expr"]


def test_queue_depth_autoscaling_metric_is_exported(exported):
    hpa = render((PRODUCTION_VALUES,)).one("HorizontalPodAutoscaler", "sy-switchyard")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] in exported.names


def test_dashboard_loads_with_unique_panel_ids_and_a_datasource_variable():
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in DASHBOARD["templating"]["list"]} >= {"datasource", "namespace", "model"}
    for panel in DASHBOARD["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
