"""What the parts of the quota benchmark share: the model, the tenants' keys and
limits, the gateway configuration they run under, and the report's percentile."""

from __future__ import annotations

import hashlib
from typing import Any

MODEL = "m"
KEYS = {"quiet": "sk-sy-bench-quiet", "flood": "sk-sy-bench-flood", "free": "sk-sy-bench-free"}
LIMITS = {"requests_per_minute": 10_000_000, "tokens_per_minute": 10_000_000_000, "max_concurrent": 100_000}


def config(
    upstream: str, store: dict, tenants: dict, max_inflight: int | None = None, admission: dict | None = None
) -> dict:
    backend: dict[str, Any] = {"name": "up", "adapter": "openai", "url": upstream + "/v1", "served_model": MODEL}
    if max_inflight is not None:
        backend["max_inflight"] = max_inflight
    return {
        "auth": {
            "mode": "keys",
            "api_keys": [{"sha256": hashlib.sha256(k.encode()).hexdigest(), "tenant": t} for t, k in KEYS.items()],
        },
        "quota_store": store,
        "tenants": tenants,
        "admission": admission or {"max_queue": 256, "max_queue_wait_s": 30},
        "models": {MODEL: {"backends": [backend]}},
        "access_log": False,
        "log_level": "warning",
    }


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (`p` in 0-100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]
