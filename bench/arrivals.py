"""Open-loop arrival schedules, precomputed before the run starts.

The runner sends request i at `start + arrivals[i]` whatever happened to earlier
requests, so a slow server cannot slow the offered load down (no coordinated
omission). Inter-arrival gaps follow vLLM bench's convention:
Gamma(shape=burstiness, scale=1/(rate*burstiness)); burstiness 1 is Poisson,
below 1 burstier, above 1 more regular, infinity a constant interval. The mean
gap is 1/rate for every burstiness.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def gamma_arrivals(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Offsets (seconds from the run's start) of n arrivals; the first is at 0."""
    if n <= 0:
        return []
    if rate <= 0 or math.isinf(rate):
        return [0.0] * n  # "as fast as possible": everything at once
    if burstiness <= 0:
        raise ValueError("burstiness must be > 0")
    if math.isinf(burstiness):
        gaps = np.full(n - 1, 1.0 / rate)
    else:
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    return gamma_arrivals(n, rate, burstiness=1.0, seed=seed)


def trace_arrivals(timestamps: Sequence[float], time_scale: float = 1.0) -> list[float]:
    """Replay a trace's timestamps (any origin, seconds) relative to its first one;
    `time_scale` 0.5 replays twice as fast."""
    if not timestamps:
        return []
    if any(b < a for a, b in zip(timestamps, timestamps[1:])):
        raise ValueError("trace timestamps must be non-decreasing")
    t0 = timestamps[0]
    return [(t - t0) * time_scale for t in timestamps]


def coefficient_of_variation(arrivals: Sequence[float]) -> float:
    """CV of the gaps: 1 for Poisson, 1/sqrt(burstiness) for gamma, 0 for constant."""
    gaps = np.diff(np.asarray(arrivals, dtype=float))
    if len(gaps) < 2 or gaps.mean() == 0:
        return 0.0
    return float(gaps.std() / gaps.mean())
