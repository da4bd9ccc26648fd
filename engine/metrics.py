"""Prometheus export of the engine's state (names prefixed switchyard_engine_)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from engine.llm_engine import EngineStats


class EngineMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.running = Gauge("switchyard_engine_running_sequences", "Sequences in the running batch", registry=registry)
        self.waiting = Gauge(
            "switchyard_engine_waiting_sequences", "Sequences waiting to be scheduled", registry=registry
        )
        self.kv_usage = Gauge(
            "switchyard_engine_kv_cache_usage_ratio", "Fraction of KV blocks in use (0..1)", registry=registry
        )
        self.prefix_hit_rate = Gauge(
            "switchyard_engine_prefix_cache_hit_rate",
            "Prompt tokens served by the prefix cache / prompt tokens scheduled",
            registry=registry,
        )
        self.preemptions = Counter(
            "switchyard_engine_preemptions", "Sequences preempted by recompute", registry=registry
        )
        self.prefix_queries = Counter(
            "switchyard_engine_prefix_cache_queries_tokens",
            "Prompt tokens looked up in the prefix cache",
            registry=registry,
        )
        self.prefix_hits = Counter(
            "switchyard_engine_prefix_cache_hits_tokens", "Prompt tokens found in the prefix cache", registry=registry
        )
        self.step_time = Histogram(
            "switchyard_engine_step_seconds",
            "Wall time of one engine step",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=registry,
        )
        self.batch_tokens = Histogram(
            "switchyard_engine_batch_tokens",
            "Tokens processed in one engine step",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
            registry=registry,
        )
        self._seen_preemptions = 0
        self._seen_queries = 0
        self._seen_hits = 0

    def observe(self, stats: EngineStats) -> None:
        self.running.set(stats.running)
        self.waiting.set(stats.waiting)
        self.kv_usage.set(stats.kv_usage)
        self.prefix_hit_rate.set(stats.prefix_hit_rate)
        # Counters only move forward: add what changed since the last observation.
        if stats.preemptions_total > self._seen_preemptions:
            self.preemptions.inc(stats.preemptions_total - self._seen_preemptions)
            self._seen_preemptions = stats.preemptions_total
        if stats.prefix_query_tokens > self._seen_queries:
            self.prefix_queries.inc(stats.prefix_query_tokens - self._seen_queries)
            self._seen_queries = stats.prefix_query_tokens
        if stats.prefix_hit_tokens > self._seen_hits:
            self.prefix_hits.inc(stats.prefix_hit_tokens - self._seen_hits)
            self._seen_hits = stats.prefix_hit_tokens
        if stats.last_batch_tokens:
            self.step_time.observe(stats.last_step_s)
            self.batch_tokens.observe(stats.last_batch_tokens)
