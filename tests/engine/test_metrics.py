"""Prometheus export of EngineStats."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from engine.llm_engine import EngineStats
from engine.metrics import EngineMetrics


def _stats(**kw) -> EngineStats:
    base = dict(
        running=0,
        waiting=0,
        kv_usage=0.0,
        prefix_hit_rate=0.0,
        preemptions_total=0,
        num_free_blocks=10,
        num_blocks=10,
        last_step_s=0.0,
        last_batch_tokens=0,
    )
    base.update(kw)
    return EngineStats(**base)


def test_gauges_and_counters_follow_stats():
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry, "a")
    metrics.observe(
        _stats(
            running=3,
            waiting=2,
            kv_usage=0.5,
            preemptions_total=1,
            prefix_query_tokens=100,
            prefix_hit_tokens=40,
            prefix_hit_rate=0.4,
            last_step_s=0.003,
            last_batch_tokens=17,
        )
    )
    metrics.observe(
        _stats(
            running=1,
            preemptions_total=4,
            prefix_query_tokens=150,
            prefix_hit_tokens=60,
            last_step_s=0.001,
            last_batch_tokens=1,
        )
    )
    # an idle step records no timing
    metrics.observe(_stats(preemptions_total=4, prefix_query_tokens=150, prefix_hit_tokens=60, last_batch_tokens=0))

    def get(name: str) -> float | None:
        return registry.get_sample_value(name, {"engine": "a"})

    assert get("switchyard_engine_running_sequences") == 0
    assert get("switchyard_engine_preemptions_total") == 4
    assert get("switchyard_engine_prefix_cache_queries_tokens_total") == 150
    assert get("switchyard_engine_prefix_cache_hits_tokens_total") == 60
    assert get("switchyard_engine_step_seconds_count") == 2
    assert get("switchyard_engine_batch_tokens_sum") == 18


def test_two_engines_report_to_one_registry_apart():
    """Two native backends in one gateway share its registry: each writes its own
    series, neither raises on registration, neither overwrites the other."""
    registry = CollectorRegistry()
    first, second = EngineMetrics(registry, "native-1"), EngineMetrics(registry, "native-2")
    first.observe(_stats(running=3, prefix_query_tokens=10, prefix_hit_tokens=4))
    second.observe(_stats(running=1, prefix_query_tokens=7, prefix_hit_tokens=7))
    get = registry.get_sample_value
    assert get("switchyard_engine_running_sequences", {"engine": "native-1"}) == 3
    assert get("switchyard_engine_running_sequences", {"engine": "native-2"}) == 1
    assert get("switchyard_engine_prefix_cache_hits_tokens_total", {"engine": "native-1"}) == 4
    assert get("switchyard_engine_prefix_cache_hits_tokens_total", {"engine": "native-2"}) == 7
