"""The knee: the highest offered rate whose SLO attainment meets the target, found by a
bounded search (pure: no clock, no I/O; the measure stage runs the probes).

A probe at one rate counts requests that were good (succeeded and met every SLO) out of
those judged; its verdict comes from a Wilson score interval of that proportion at the
plan's confidence (docs/bakeoff.md, "The knee"): `pass` when the whole interval lies at
or above the target attainment, `fail` when it lies below, `undetermined` when it
straddles the target (the probe was too short to tell). A binomial proportion near 1 on
tens of requests is where the normal approximation breaks (its interval passes 1), hence
Wilson's.

The search starts at `start_rate` and multiplies by `growth` while probes pass (up to
`max_rate`), then bisects geometrically between the highest pass and the lowest non-pass
until their ratio is within `1 + tolerance` or `max_probes` ran. An undetermined probe
bounds the search from above like a fail (the knee is the highest rate *shown* to meet
the SLO) and is reported as such.

A non-pass is believed only once it is confirmed (`rerun`): an undetermined probe is run
again twice as long (more requests, a narrower interval), a failed one again at the same
length; a rate passes if one of its runs passes. Why: what else runs on the machine only
ever slows a candidate (noise on one side), so a failure that the same rate does not
repeat was the machine's, and a knee bounded by it would move from run to run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Literal

Verdict = Literal["pass", "fail", "undetermined"]
Rerun = Literal["longer", "confirm"]
StopReason = Literal["converged", "max_rate_reached", "max_probes", "fails_at_start", "budget"]


def wilson_interval(good: int, total: int, confidence: float) -> tuple[float, float]:
    """The two-sided Wilson score interval of good/total (0..1 both when total is 0)."""
    if total <= 0:
        return (0.0, 1.0)
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be within (0, 1)")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = good / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def decide(good: int, total: int, target: float, confidence: float) -> Verdict:
    """pass / fail / undetermined for an attainment target (docs/bakeoff.md)."""
    lo, hi = wilson_interval(good, total, confidence)
    if total > 0 and lo >= target:
        return "pass"
    if total > 0 and hi < target:
        return "fail"
    return "undetermined"


@dataclass(frozen=True)
class Probe:
    rate: float
    verdict: Verdict
    good: int = 0
    judged: int = 0
    interval: tuple[float, float] = (0.0, 1.0)
    why: str = ""  # what decided a non-pass besides attainment (error rate, ITL bound)


def rerun(verdicts: list[Verdict], lengthen: int, confirm: int) -> Rerun | None:
    """After the runs so far at one rate (`verdicts`, in order), what to run next there:
    `longer` (twice as long) for an undetermined run while `lengthen` lengthened reruns are
    left, `confirm` (same length) while the non-pass runs are at most `confirm`, else None
    (a pass, or a non-pass confirmed: believed)."""
    if not verdicts or verdicts[-1] == "pass":
        return None
    if verdicts[-1] == "undetermined" and sum(1 for v in verdicts if v == "undetermined") <= lengthen:
        return "longer"
    if len(verdicts) <= confirm:
        return "confirm"
    return None


@dataclass
class KneeSearch:
    start_rate: float
    max_rate: float
    growth: float = 2.0
    tolerance: float = 0.15
    max_probes: int = 8
    probes: list[Probe] = field(default_factory=list)
    stop_reason: StopReason | None = None

    def __post_init__(self) -> None:
        if self.start_rate <= 0 or self.max_rate < self.start_rate:
            raise ValueError("need 0 < start_rate <= max_rate")
        if self.growth <= 1 or self.tolerance <= 0 or self.max_probes < 1:
            raise ValueError("need growth > 1, tolerance > 0 and max_probes >= 1")

    @property
    def best_pass(self) -> float | None:
        passes = [p.rate for p in self.probes if p.verdict == "pass"]
        return max(passes) if passes else None

    @property
    def lowest_non_pass(self) -> float | None:
        others = [p.rate for p in self.probes if p.verdict != "pass"]
        return min(others) if others else None

    def next_rate(self) -> float | None:
        """The rate to probe next, or None when the search is over (`stop_reason` says why)."""
        if self.stop_reason is not None:
            return None
        if len(self.probes) >= self.max_probes:
            self.stop_reason = "max_probes"
            return None
        lo, hi = self.best_pass, self.lowest_non_pass
        if not self.probes:
            return self.start_rate
        if lo is None:
            self.stop_reason = "fails_at_start"
            return None
        if hi is None:
            if lo >= self.max_rate:
                self.stop_reason = "max_rate_reached"
                return None
            return min(lo * self.growth, self.max_rate)
        if hi / lo <= 1 + self.tolerance:
            self.stop_reason = "converged"
            return None
        return math.sqrt(lo * hi)

    def record(self, probe: Probe) -> None:
        self.probes.append(probe)

    def stop(self, reason: StopReason) -> None:
        self.stop_reason = reason

    def result(self) -> dict[str, Any]:
        return {
            "knee_rate": self.best_pass,
            "lowest_non_pass": self.lowest_non_pass,
            "stop_reason": self.stop_reason,
            "probes": [asdict(p) for p in self.probes],
        }
