"""gateway/protection/metrics.py: the names, kinds and labels of the protection metrics
(what dashboards and alerts read), the quota check's buckets, and the live state read
at scrape time: queue depth and in flight per model, live tickets, leases held and
releases pending."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from gateway.protection.metrics import ProtectionMetrics, StateCollector
from policies.admission import AdmissionQueue


def families(registry: CollectorRegistry) -> dict[str, tuple[str, set[tuple[str, ...]]]]:
    """Each family by name: its kind and the label names of its samples."""
    return {f.name: (f.type, {tuple(sorted(s.labels)) for s in f.samples}) for f in registry.collect()}


def test_each_metric_has_its_name_kind_and_labels() -> None:
    registry = CollectorRegistry()
    m = ProtectionMetrics(registry)
    m.decisions.labels("admitted").inc()
    m.store_unavailable.labels("fail_open").inc()
    m.store_up.set(1)
    m.store_transitions.labels("down").inc()
    m.check_seconds.labels("memory").observe(0.001)
    m.queue_rejected.labels("m", "queue_full").inc()
    m.queue_wait.labels("m").observe(0.5)
    m.leaked.inc()
    found = families(registry)
    assert found["switchyard_quota_decisions"][0] == "counter"
    assert ("result",) in found["switchyard_quota_decisions"][1]
    assert ("policy",) in found["switchyard_quota_store_unavailable"][1]
    assert found["switchyard_quota_store_up"] == ("gauge", {()})
    assert ("to",) in found["switchyard_quota_store_transitions"][1]
    assert found["switchyard_quota_check_seconds"][0] == "histogram"
    assert ("le", "store") in found["switchyard_quota_check_seconds"][1]
    assert ("model", "reason") in found["switchyard_admission_rejected"][1]
    assert found["switchyard_admission_wait_seconds"][0] == "histogram"
    assert ("le", "model") in found["switchyard_admission_wait_seconds"][1]
    assert found["switchyard_protection_leaked_tickets"][0] == "counter"
    value = registry.get_sample_value
    assert value("switchyard_quota_decisions_total", {"result": "admitted"}) == 1
    assert value("switchyard_admission_rejected_total", {"model": "m", "reason": "queue_full"}) == 1
    assert value("switchyard_protection_leaked_tickets_total") == 1


def test_the_quota_check_is_measured_from_50_microseconds_to_half_a_second() -> None:
    registry = CollectorRegistry()
    ProtectionMetrics(registry).check_seconds.labels("redis").observe(0.3)
    bounds = [
        s.labels["le"]
        for f in registry.collect()
        for s in f.samples
        if s.name == "switchyard_quota_check_seconds_bucket"
    ]
    assert bounds == [
        "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.1", "0.5", "+Inf"
    ]  # fmt: skip


async def test_the_live_state_is_read_at_each_scrape() -> None:
    queue = AdmissionQueue(max_queue=4, max_wait_s=1.0, capacity=lambda model: 2)
    state = {"tickets": 3, "leases": 2, "pending": 1}
    registry = CollectorRegistry()
    registry.register(
        StateCollector(queue, lambda: state["tickets"], lambda: state["leases"], lambda: state["pending"])
    )
    value = registry.get_sample_value
    assert value("switchyard_live_tickets") == 3 and value("switchyard_quota_leases_held") == 2
    assert value("switchyard_quota_pending_releases") == 1
    state.update(tickets=0, leases=5, pending=7)
    assert value("switchyard_live_tickets") == 0 and value("switchyard_quota_leases_held") == 5
    assert value("switchyard_quota_pending_releases") == 7
    kinds = {f.name: f.type for f in registry.collect()}
    assert kinds["switchyard_admission_queue_depth"] == kinds["switchyard_admission_inflight"] == "gauge"
    assert value("switchyard_admission_queue_depth", {"model": "m"}) is None  # no model queued yet
    await queue.enter("m", "a", 1, units=2)
    waiter = asyncio.create_task(queue.enter("m", "a", 1))
    await asyncio.sleep(0.05)
    assert value("switchyard_admission_queue_depth", {"model": "m"}) == 1
    assert value("switchyard_admission_inflight", {"model": "m"}) == 2
    waiter.cancel()


def test_the_live_state_gauges_say_what_they_count() -> None:
    # Their help lines are written at each scrape (a collector, not registered metrics).
    registry = CollectorRegistry()
    registry.register(StateCollector(AdmissionQueue(max_queue=1, max_wait_s=1.0), lambda: 0, lambda: 0, lambda: 0))
    assert {f.name: f.documentation for f in registry.collect()} == {
        "switchyard_admission_queue_depth": "Requests waiting per model.",
        "switchyard_admission_inflight": "Generations of dispatched, unreleased requests per model.",
        "switchyard_live_tickets": "Admitted requests not yet released.",
        "switchyard_quota_leases_held": (
            "Quota reservations (each with its concurrency lease) this replica holds, queued or dispatched."
        ),
        "switchyard_quota_pending_releases": "Releases kept for the quota store until it answers again.",
    }
