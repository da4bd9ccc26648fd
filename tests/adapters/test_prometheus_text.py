"""The Prometheus text reader on series shaped like the runtimes' /metrics."""

from __future__ import annotations

import math

from adapters import prometheus_text as prom

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.75
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 12.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 12.0
weird{label="a \\"quoted\\", value}",other="x"} 5 1700000000000
nan_gauge{a="b"} NaN
not a sample line
"""


def test_sums_over_label_sets():
    samples = prom.parse(VLLM_METRICS)
    assert prom.total(samples, "vllm:num_requests_running") == 5.0
    assert prom.total(samples, "vllm:num_requests_running", engine="1") == 2.0
    assert prom.total(samples, "vllm:num_requests_waiting") == 7.0


def test_missing_metric_is_unknown_not_zero():
    samples = prom.parse(VLLM_METRICS)
    assert prom.total(samples, "vllm:does_not_exist") is None
    assert prom.mean(samples, "vllm:does_not_exist") is None


def test_mean_of_ratios_and_first_name_found():
    samples = prom.parse(VLLM_METRICS)
    assert prom.mean(samples, "vllm:kv_cache_usage_perc") == 0.5
    assert prom.first_total(samples, "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc") == 1.0


def test_quoted_label_values_and_timestamps():
    samples = prom.parse(VLLM_METRICS)
    weird = [s for s in samples if s.name == "weird"][0]
    assert weird.labels == {"label": 'a "quoted", value}', "other": "x"}
    assert weird.value == 5


def test_nan_is_skipped_in_sums_and_bad_lines_ignored():
    samples = prom.parse(VLLM_METRICS)
    assert any(s.name == "nan_gauge" and math.isnan(s.value) for s in samples)
    assert prom.total(samples, "nan_gauge") is None
    assert not any(s.name == "not" for s in samples)
    assert prom.total(samples, "vllm:e2e_request_latency_seconds_bucket", le="+Inf") == 12.0
