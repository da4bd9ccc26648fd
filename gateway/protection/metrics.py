"""The metrics of auth, quotas and admission (gateway/protection/gate.py), and the live
state read at scrape time: what must return to zero when the gateway is idle."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from gateway.observe.metrics import registered
from policies.admission import AdmissionQueue


class ProtectionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        counter, gauge, histogram = registered(registry)
        self.decisions = counter(
            "switchyard_quota_decisions_total", "Quota decisions: admitted, or the limit that refused.", ["result"]
        )
        self.store_unavailable = counter(
            "switchyard_quota_store_unavailable_total",
            "Quota checks that found the shared store unreachable, by the policy applied.",
            ["policy"],
        )
        self.store_up = gauge(
            "switchyard_quota_store_up",
            "1 while the quota store answers (always for kind=memory); 0 while the fail policy applies.",
        )
        self.store_transitions = counter(
            "switchyard_quota_store_transitions_total",
            "Times the quota store was found down, or answering again.",
            ["to"],
        )
        self.check_seconds = histogram(
            "switchyard_quota_check_seconds",
            "Time spent in one quota reservation.",
            ["store"],
            buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5),
        )
        self.queue_rejected = counter(
            "switchyard_admission_rejected_total", "Requests the admission queue turned away.", ["model", "reason"]
        )
        self.queue_wait = histogram("switchyard_admission_wait_seconds", "Time spent waiting in the queue.", ["model"])
        self.leaked = counter(
            "switchyard_protection_leaked_tickets_total",
            "Tickets collected without release (a bug; their resources were freed then).",
        )


class StateCollector:
    """Queue depth and in-flight requests per model, the live tickets, the
    quota leases this replica holds and its releases waiting for the store."""

    def __init__(
        self,
        queue: AdmissionQueue,
        live_tickets: Callable[[], int],
        leases_held: Callable[[], int],
        pending_releases: Callable[[], int],
    ) -> None:
        self.queue = queue
        self.live_tickets = live_tickets
        self.leases_held = leases_held
        self.pending_releases = pending_releases

    def collect(self):
        depth = GaugeMetricFamily("switchyard_admission_queue_depth", "Requests waiting per model.", labels=["model"])
        inflight = GaugeMetricFamily(
            "switchyard_admission_inflight",
            "Generations of dispatched, unreleased requests per model.",
            labels=["model"],
        )
        for model in self.queue.models():
            depth.add_metric([model], self.queue.waiting(model))
            inflight.add_metric([model], self.queue.in_flight(model))
        yield depth
        yield inflight
        yield _gauge("switchyard_live_tickets", "Admitted requests not yet released.", self.live_tickets())
        yield _gauge(
            "switchyard_quota_leases_held",
            "Quota reservations (each with its concurrency lease) this replica holds, queued or dispatched.",
            self.leases_held(),
        )
        yield _gauge(
            "switchyard_quota_pending_releases",
            "Releases kept for the quota store until it answers again.",
            self.pending_releases(),
        )

    def describe(self):
        return []


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation)
    family.add_metric([], value)
    return family
