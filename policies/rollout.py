"""A rollout's analysis: one window of the candidate judged against the stable track.

Pure. `analyse` reads the window's `TrackRecord`s and
`MirrorComparison`s (policies/rollout_records.py) and gives one `GateVerdict` per gate
and the window's `decision` (`rollback` if any gate fails, `promote` if all pass, else
`hold`). The rules (Wilson lower bounds; `insufficient`, never `pass`, below
`min_samples`; n = 0 passes for a gate no traffic exercised): docs/rollouts.md, "Gates".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import Field

from policies.rollout_records import MirrorComparison, TrackRecord
from policies.settings import Settings

Verdict = Literal["pass", "fail", "insufficient"]
Decision = Literal["promote", "rollback", "hold"]
Z = 1.96  # two-sided 95%
ERROR_KINDS = frozenset({"server_error", "overload"})
TIMEOUT_KIND = "timeout"
_USAGE = re.compile(r"^usage: prompt_tokens (\d+) != (\d+)$")


class GateLimits(Settings):
    """`models.<name>.rollout.gates`: what the candidate must hold against stable over a
    window to be promoted; a broken gate rolls it back (docs/rollouts.md, "Gates")."""

    # Latency: the candidate's TTFT and mean inter-token gap against stable's percentile
    # (`*_percentile`, p95 by default; the ratios' names keep "p95") times the ratio.
    ttft_p95_ratio_max: float = Field(1.5, ge=1)
    itl_p95_ratio_max: float = Field(1.5, ge=1)
    ttft_percentile: float = Field(0.95, gt=0, lt=1)
    itl_percentile: float = Field(0.95, gt=0, lt=1)
    # Failures (5xx, overload; timeouts): the candidate's rate at most stable's plus this.
    error_rate_max_delta: float = Field(0.01, ge=0, le=1)
    timeout_rate_max_delta: float = Field(0.01, ge=0, le=1)
    # Finish reasons: total variation distance between the two tracks' distributions.
    finish_reason_distance_max: float = Field(0.2, ge=0, le=1)
    # The candidate's share of invalid tool calls and structured answers, over stable's
    # share plus this (the max alone without stable samples).
    tool_call_invalid_rate_max: float = Field(0.02, ge=0, le=1)
    structured_invalid_rate_max: float = Field(0.02, ge=0, le=1)
    # Usage: the candidate's prompt tokens for the same (mirrored) prompt within this
    # relative distance of stable's; and the share of mirrored pairs that may differ.
    usage_tolerance: float = Field(0.02, ge=0, le=1)
    mirror_difference_rate_max: float = Field(0.1, ge=0, le=1)


@dataclass(frozen=True)
class GateVerdict:
    """One gate's verdict with the numbers it was reached on: `n` the candidate's (or the
    mirror's) sample, `value` what was measured, `limit` what it was held to, `bound` the
    evidence (the Wilson lower bound for rates; None where a point estimate is judged)."""

    gate: str
    verdict: Verdict
    n: int
    value: float | None = None
    limit: float | None = None
    bound: float | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


@dataclass(frozen=True)
class WindowVerdict:
    """The window's gates, its decision, and the requests each track served in it."""

    gates: tuple[GateVerdict, ...]
    stable_n: int
    candidate_n: int
    mirror_n: int
    examples: tuple[str, ...] = field(default_factory=tuple)  # mirror differences kept, bounded

    @property
    def decision(self) -> Decision:
        verdicts = {g.verdict for g in self.gates}
        if "fail" in verdicts:
            return "rollback"
        if verdicts <= {"pass"}:
            return "promote"
        return "hold"

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(g.gate for g in self.gates if g.verdict == "fail")

    def to_dict(self) -> dict[str, object]:
        return {
            "decision": self.decision,
            "stable_n": self.stable_n,
            "candidate_n": self.candidate_n,
            "mirror_n": self.mirror_n,
            "gates": [g.to_dict() for g in self.gates],
            "examples": list(self.examples),
        }


def wilson(successes: int, n: int, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (0, 1 when n is 0): unlike the
    normal approximation it stays inside [0, 1] and is honest about small samples."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # the bounds hold p itself even where rounding would put it a hair outside
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (q in (0, 1]) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def total_variation(a: Iterable[str], b: Iterable[str]) -> float:
    """Half the L1 distance of two empirical distributions (0: alike, 1: disjoint)."""
    ca, cb = Counter(a), Counter(b)
    na, nb = sum(ca.values()), sum(cb.values())
    if not na or not nb:
        return 0.0
    return 0.5 * sum(abs(ca[k] / na - cb[k] / nb) for k in set(ca) | set(cb))


def usage_off(difference: str, tolerance: float) -> bool:
    """Whether a mirror difference "usage: prompt_tokens A != B" (candidate, stable) is
    beyond the relative tolerance; any other usage difference counts as off."""
    if not difference.startswith("usage:"):
        return False
    match = _USAGE.match(difference)
    if match is None:
        return True
    candidate, stable = int(match.group(1)), int(match.group(2))
    return abs(candidate - stable) > tolerance * max(stable, 1)


def rate_gate(gate: str, bad: int, n: int, limit: float, min_samples: int, exercised: bool = True) -> GateVerdict:
    """`bad` of `n` against `limit`: fail on the evidence (Wilson lower bound over the
    limit), pass with enough samples, else insufficient; pass with n = 0 if not exercised."""
    if not exercised:
        return GateVerdict(gate, "pass", 0, limit=limit, detail="not exercised in this window")
    low, _ = wilson(bad, n)
    value = bad / n if n else None
    if n and low > limit:
        verdict: Verdict = "fail"
    elif n >= min_samples:
        verdict = "pass"
    else:
        verdict = "insufficient"
    return GateVerdict(gate, verdict, n, value=value, limit=limit, bound=round(low, 6))


def _rate_delta_gate(
    gate: str,
    stable: Sequence[TrackRecord],
    candidate: Sequence[TrackRecord],
    kinds: frozenset[str],
    delta: float,
    min_samples: int,
) -> GateVerdict:
    """A failure rate: the candidate's held to the stable one plus `delta`."""
    if len(stable) < min_samples:
        return GateVerdict(gate, "insufficient", len(candidate), detail=f"stable served {len(stable)} < {min_samples}")
    stable_rate = sum(r.failure in kinds for r in stable) / len(stable)
    bad = sum(r.failure in kinds for r in candidate)
    verdict = rate_gate(gate, bad, len(candidate), min(1.0, stable_rate + delta), min_samples)
    return replace(verdict, detail=f"stable rate {stable_rate:.4f}")


def _latency_gate(
    gate: str, stable: list[float], candidate: list[float], ratio: float, q: float, min_samples: int
) -> GateVerdict:
    """The candidate's share over the stable percentile `q` x `ratio`, judged as a rate
    against the share the percentile leaves above it (1 - q: 5% for p95)."""
    if len(stable) < min_samples:
        return GateVerdict(gate, "insufficient", len(candidate), limit=ratio, detail=f"stable n {len(stable)}")
    tail = percentile(stable, q)
    over = sum(v > tail * ratio for v in candidate)
    judged = rate_gate(gate, over, len(candidate), 1.0 - q, min_samples)
    measured = percentile(candidate, q) / tail if candidate and tail > 0 else None
    detail = f"stable p{q * 100:g} {tail:.4f}s, candidate over {ratio:g}x it: {over}/{len(candidate)}"
    return GateVerdict(
        gate, judged.verdict, len(candidate), value=measured, limit=ratio, bound=judged.bound, detail=detail
    )


def _finish_gate(
    stable: Sequence[TrackRecord], candidate: Sequence[TrackRecord], limit: float, min_samples: int
) -> GateVerdict:
    s = [r.finish_reason for r in stable if r.failure is None and r.finish_reason]
    c = [r.finish_reason for r in candidate if r.failure is None and r.finish_reason]
    gate = "finish_reason_distance"
    if len(s) < min_samples or len(c) < min_samples:
        return GateVerdict(gate, "insufficient", len(c), limit=limit)
    distance = total_variation(s, c)
    verdict: Verdict = "fail" if distance > limit else "pass"
    return GateVerdict(gate, verdict, len(c), value=round(distance, 6), limit=limit)


def _validity_gate(
    gate: str, stable: Sequence[bool | None], candidate: Sequence[bool | None], limit: float, min_samples: int
) -> GateVerdict:
    judged = [v for v in candidate if v is not None]
    base = [v for v in stable if v is not None]
    exercised = bool(judged) or bool(base)
    if len(base) >= min_samples:  # held to stable's own invalid share plus the max
        limit = min(1.0, sum(not v for v in base) / len(base) + limit)
    return rate_gate(gate, sum(not v for v in judged), len(judged), limit, min_samples, exercised)


def analyse(
    records: Iterable[TrackRecord],
    comparisons: Iterable[MirrorComparison],
    gates: GateLimits,
    mirror_on: bool = False,
    examples_max: int = 5,
    min_samples: int = 20,
) -> WindowVerdict:
    """Judge one window. `mirror_on`: the mirror was meant to run (then no comparison is
    too few, not unexercised); `min_samples`: per track and gate before a verdict."""
    window = list(records)
    stable = [r for r in window if r.track == "stable"]
    candidate = [r for r in window if r.track == "candidate"]
    mirrored = list(comparisons)
    ttft = ([r.ttft_s for r in stable if r.ttft_s is not None], [r.ttft_s for r in candidate if r.ttft_s is not None])
    itl = ([r.itl_s for r in stable if r.itl_s is not None], [r.itl_s for r in candidate if r.itl_s is not None])
    usage_bad = sum(any(usage_off(d, gates.usage_tolerance) for d in m.differences) for m in mirrored)
    different = [m for m in mirrored if _differs(m, gates.usage_tolerance)]
    exercised = mirror_on or bool(mirrored)
    verdicts = (
        _latency_gate("ttft_p95_ratio", *ttft, gates.ttft_p95_ratio_max, gates.ttft_percentile, min_samples),
        _latency_gate("itl_p95_ratio", *itl, gates.itl_p95_ratio_max, gates.itl_percentile, min_samples),
        _rate_delta_gate("error_rate", stable, candidate, ERROR_KINDS, gates.error_rate_max_delta, min_samples),
        _rate_delta_gate(
            "timeout_rate", stable, candidate, frozenset({TIMEOUT_KIND}), gates.timeout_rate_max_delta, min_samples
        ),
        _finish_gate(stable, candidate, gates.finish_reason_distance_max, min_samples),
        _validity_gate(
            "tool_call_invalid_rate",
            [r.tool_calls_valid for r in stable],
            [r.tool_calls_valid for r in candidate],
            gates.tool_call_invalid_rate_max,
            min_samples,
        ),
        _validity_gate(
            "structured_invalid_rate",
            [r.structured_valid for r in stable],
            [r.structured_valid for r in candidate],
            gates.structured_invalid_rate_max,
            min_samples,
        ),
        rate_gate(
            "usage_consistency",
            usage_bad,
            len(mirrored),
            gates.mirror_difference_rate_max,
            min_samples,
            exercised,
        ),
        rate_gate(
            "mirror_difference_rate",
            len(different),
            len(mirrored),
            gates.mirror_difference_rate_max,
            min_samples,
            exercised,
        ),
    )
    examples = tuple("; ".join(_described(m)) for m in different[:examples_max])
    return WindowVerdict(verdicts, len(stable), len(candidate), len(mirrored), examples)


def _differs(m: MirrorComparison, tolerance: float) -> bool:
    """A mirrored pair that differs beyond the usage tolerance (a usage difference within
    it is alike), or whose failures differ."""
    if m.candidate_failure != m.stable_failure:
        return True
    return any(not d.startswith("usage:") or usage_off(d, tolerance) for d in m.differences)


def _described(m: MirrorComparison) -> list[str]:
    parts = list(m.differences)
    if m.candidate_failure != m.stable_failure:
        parts.append(f"failure: {m.candidate_failure} != {m.stable_failure}")
    return parts
