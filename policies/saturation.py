"""The one definition of a saturated backend, asked by admission (how much a model can
hold) and by routing (which backends go last), so the backend admission holds work back
from is the one routing avoids: `queue_depth` or more waiting, or the KV cache at
`kv_cache_utilization` or more (the Inference Extension's defaults), or `max_inflight`
open to it. A load reading older than `max_load_age_s` is ignored, not counted as
saturated (docs/architecture.md, "Routing", says why).
"""

from __future__ import annotations

import time
from enum import Enum

from pydantic import Field

from adapters.base import LoadSnapshot
from policies.settings import Settings


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


class SaturationDetector(Settings):
    """The thresholds (`models.<name>.saturation`) and the check."""

    queue_depth: int = Field(5, ge=1)  # requests waiting in the runtime's own queue
    kv_cache_utilization: float = Field(0.8, gt=0, le=1)  # of its KV cache
    max_load_age_s: float = Field(5.0, gt=0)  # an older load reading is ignored

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
