"""The one definition of a saturated backend.

Admission (policies/admission.py) asks it how many requests a model's backends can
hold; routing (policies/routing.py) asks it which backends go last. Both ask the same
`SaturationDetector`, so a backend that admission holds work back from is also the
one routing avoids.

A backend is saturated when any of these holds, checked in this order:

* Queue depth: its runtime reports `queue_depth` (default 5) or more requests
  waiting. The runtime is already queueing; more work only lengthens every waiting
  request's time to first token, and our own queue orders waiters fairly where the
  runtime's does not.
* KV cache: its runtime reports its KV cache at `kv_cache_utilization` (default
  0.8, i.e. 80%) or more. A continuous-batching runtime close to a full cache starts
  preempting running sequences (recomputing or swapping them), which costs more than
  waiting here; 80% leaves room for the sequences already running to grow.
* In flight: the gateway has `max_inflight` requests open to it (the backend's
  config), whatever its runtime reports.

The two runtime thresholds are the defaults of the Kubernetes Gateway API Inference
Extension's saturation detector, which gates dispatch on the same two signals. It
counts a pod as having room while both stay at or below them; we count reaching a
threshold as saturated, the rule this gateway's admission has always used. We keep
its numbers so that operators who tuned one know the other.

Staleness: the gateway reads each runtime's load every 2 s. A snapshot older than
`max_load_age_s` (default 5 s: more than two missed reads) is ignored, neither
saturated nor calm, and then only `max_inflight` decides. The Inference Extension
does the opposite (metrics older than 200 ms count as saturated) because it scrapes
every 50 ms, so there stale means broken; here a slow metrics endpoint is the likely cause, and
counting it as saturated would stop a whole model's admission on a metrics hiccup.
Whether a backend is usable at all is the health check's call, not the load's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

from adapters.base import LoadSnapshot


class Saturation(Enum):
    """Why a backend is saturated, or NONE."""

    NONE = "none"
    QUEUE_DEPTH = "queue_depth"
    KV_CACHE = "kv_cache"
    MAX_INFLIGHT = "max_inflight"

    @property
    def saturated(self) -> bool:
        return self is not Saturation.NONE

    @property
    def reported_by_runtime(self) -> bool:
        """The runtime itself says it is full (not only our in-flight limit)."""
        return self in (Saturation.QUEUE_DEPTH, Saturation.KV_CACHE)


@dataclass(frozen=True, slots=True)
class SaturationDetector:
    """The thresholds (see the module docstring for why these values) and the check."""

    queue_depth: int = 5
    kv_cache_utilization: float = 0.8
    max_load_age_s: float = 5.0

    def fresh(self, load: LoadSnapshot | None, now: float | None = None) -> LoadSnapshot | None:
        """`load` if it is recent enough to trust, else None."""
        if load is None:
            return None
        if (time.time() if now is None else now) - load.read_at > self.max_load_age_s:
            return None
        return load

    def check(
        self, inflight: int, max_inflight: int | None, load: LoadSnapshot | None, now: float | None = None
    ) -> Saturation:
        """The backend's saturation. The runtime's own signals come first, so that
        admission can tell a runtime that is full from one at our in-flight limit."""
        signals = self.fresh(load, now)
        if signals is not None:
            if signals.waiting is not None and signals.waiting >= self.queue_depth:
                return Saturation.QUEUE_DEPTH
            if signals.kv_usage is not None and signals.kv_usage >= self.kv_cache_utilization:
                return Saturation.KV_CACHE
        if max_inflight is not None and inflight >= max_inflight:
            return Saturation.MAX_INFLIGHT
        return Saturation.NONE


DEFAULT_DETECTOR = SaturationDetector()
