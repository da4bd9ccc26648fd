"""engine/metrics.py as a scrape reads it: each family's name, help and type, the
`engine` label on every series (the default name included) and the histograms' buckets."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from engine.llm_engine import EngineStats
from engine.metrics import EngineMetrics

HELP = {
    "switchyard_engine_running_sequences": ("gauge", "Sequences in the running batch"),
    "switchyard_engine_waiting_sequences": ("gauge", "Sequences waiting to be scheduled"),
    "switchyard_engine_kv_cache_usage_ratio": ("gauge", "Fraction of KV blocks in use (0..1)"),
    "switchyard_engine_prefix_cache_hit_rate": (
        "gauge",
        "Prompt tokens served by the prefix cache / prompt tokens scheduled",
    ),
    "switchyard_engine_preemptions": ("counter", "Sequences preempted by recompute"),
    "switchyard_engine_prefix_cache_queries_tokens": ("counter", "Prompt tokens looked up in the prefix cache"),
    "switchyard_engine_prefix_cache_hits_tokens": ("counter", "Prompt tokens found in the prefix cache"),
    "switchyard_engine_step_seconds": ("histogram", "Wall time of one engine step"),
    "switchyard_engine_batch_tokens": ("histogram", "Tokens processed in one engine step"),
}
STEP_BUCKETS = ["0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.25", "0.5", "1.0", "+Inf"]
BATCH_BUCKETS = [str(float(2**i)) for i in range(13)] + ["+Inf"]


def _scrape() -> tuple[EngineMetrics, list[str]]:
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry)
    metrics.observe(
        EngineStats(
            running=1,
            waiting=2,
            kv_usage=0.25,
            prefix_hit_rate=0.5,
            preemptions_total=3,
            num_free_blocks=1,
            num_blocks=4,
            last_step_s=0.01,
            last_batch_tokens=8,
            prefix_query_tokens=10,
            prefix_hit_tokens=5,
        )
    )
    return metrics, generate_latest(registry).decode().splitlines()


def test_each_family_is_named_described_and_typed():
    _, lines = _scrape()
    helps = {ln.split()[2]: ln.split(" ", 3)[3] for ln in lines if ln.startswith("# HELP")}
    types = {ln.split()[2]: ln.split()[3] for ln in lines if ln.startswith("# TYPE")}
    for name, (kind, text) in HELP.items():
        key = name + ("_total" if kind == "counter" else "")
        assert helps.get(key) == text, name
        assert types.get(key) == kind, name


def test_every_series_carries_the_engines_name():
    metrics, lines = _scrape()
    assert metrics.name == "engine"
    samples = [ln for ln in lines if ln.startswith("switchyard_engine_") and "_created" not in ln]
    for family in HELP:
        mine = [ln for ln in samples if ln.startswith(family)]
        assert mine, family
        assert all('engine="engine"' in ln for ln in mine), family


def test_the_histograms_buckets():
    _, lines = _scrape()

    def buckets(family: str) -> list[str]:
        return [ln.split('le="')[1].split('"')[0] for ln in lines if ln.startswith(family + "_bucket")]

    assert buckets("switchyard_engine_step_seconds") == STEP_BUCKETS
    assert buckets("switchyard_engine_batch_tokens") == BATCH_BUCKETS
