"""Arrival-process statistics with fixed seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.arrivals import coefficient_of_variation, gamma_arrivals, poisson_arrivals, trace_arrivals


def test_poisson_mean_rate_and_exponential_gaps() -> None:
    a = poisson_arrivals(20000, rate=50.0, seed=1)
    gaps = np.diff(a)
    assert a[0] == 0.0
    assert 1 / gaps.mean() == pytest.approx(50.0, rel=0.03)
    assert coefficient_of_variation(a) == pytest.approx(1.0, abs=0.03)  # exponential: CV 1
    # Memorylessness: P(gap > mean) = e^-1.
    assert (gaps > 1 / 50).mean() == pytest.approx(math.exp(-1), abs=0.02)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_burstiness_keeps_rate_and_sets_cv(burstiness: float) -> None:
    a = gamma_arrivals(20000, rate=20.0, burstiness=burstiness, seed=2)
    assert 1 / np.diff(a).mean() == pytest.approx(20.0, rel=0.05)
    assert coefficient_of_variation(a) == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)


def test_constant_rate_and_everything_at_once() -> None:
    assert gamma_arrivals(4, rate=2.0, burstiness=math.inf) == pytest.approx([0.0, 0.5, 1.0, 1.5])
    assert gamma_arrivals(3, rate=math.inf) == [0.0, 0.0, 0.0]


def test_same_seed_same_schedule_other_seed_differs() -> None:
    assert poisson_arrivals(50, 10, seed=7) == poisson_arrivals(50, 10, seed=7)
    assert poisson_arrivals(50, 10, seed=7) != poisson_arrivals(50, 10, seed=8)


def test_trace_replay_is_relative_and_scaled() -> None:
    assert trace_arrivals([100.0, 100.5, 102.0], time_scale=0.5) == pytest.approx([0.0, 0.25, 1.0])
    with pytest.raises(ValueError):
        trace_arrivals([2.0, 1.0])
