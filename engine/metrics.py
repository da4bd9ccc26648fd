"""Prometheus export of the engine's state (names prefixed switchyard_engine_).

One gateway may run several native engines (backends of one model, or of several):
the families are registered once per registry and each engine writes its own
`engine` label, so two engines never collide on a name and a scrape tells them apart.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from engine.llm_engine import EngineStats

LABELS = ("engine",)


class _Families:
    """The metric families of one registry, shared by every engine that reports to it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry)

        self.running = gauge("switchyard_engine_running_sequences", "Sequences in the running batch")
        self.waiting = gauge("switchyard_engine_waiting_sequences", "Sequences waiting to be scheduled")
        self.kv_usage = gauge("switchyard_engine_kv_cache_usage_ratio", "Fraction of KV blocks in use (0..1)")
        self.prefix_hit_rate = gauge(
            "switchyard_engine_prefix_cache_hit_rate",
            "Prompt tokens served by the prefix cache / prompt tokens scheduled",
        )
        self.preemptions = counter("switchyard_engine_preemptions", "Sequences preempted by recompute")
        self.prefix_queries = counter(
            "switchyard_engine_prefix_cache_queries_tokens", "Prompt tokens looked up in the prefix cache"
        )
        self.prefix_hits = counter(
            "switchyard_engine_prefix_cache_hits_tokens", "Prompt tokens found in the prefix cache"
        )
        self.step_time = Histogram(
            "switchyard_engine_step_seconds",
            "Wall time of one engine step",
            LABELS,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=registry,
        )
        self.batch_tokens = Histogram(
            "switchyard_engine_batch_tokens",
            "Tokens processed in one engine step",
            LABELS,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
            registry=registry,
        )


_families: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = weakref.WeakKeyDictionary()
_families_lock = threading.Lock()


def _families_of(registry: CollectorRegistry) -> _Families:
    with _families_lock:
        families = _families.get(registry)
        if families is None:
            families = _families[registry] = _Families(registry)
        return families


class EngineMetrics:
    """One engine's series, labelled `engine=<name>` (the backend's name in a gateway)."""

    def __init__(self, registry: CollectorRegistry, name: str = "engine") -> None:
        # A backend reloaded under the same name takes over the same series (no removal
        # on close: the old engine's close would otherwise delete the new one's).
        f = _families_of(registry)
        self.name = name
        self.running = f.running.labels(name)
        self.waiting = f.waiting.labels(name)
        self.kv_usage = f.kv_usage.labels(name)
        self.prefix_hit_rate = f.prefix_hit_rate.labels(name)
        self.preemptions = f.preemptions.labels(name)
        self.prefix_queries = f.prefix_queries.labels(name)
        self.prefix_hits = f.prefix_hits.labels(name)
        self.step_time = f.step_time.labels(name)
        self.batch_tokens = f.batch_tokens.labels(name)
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
