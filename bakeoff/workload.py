"""The bake-off's workload, fixed by the plan and its seed: the same sessions (text,
lengths, tenants, prefixes, turns) and the same arrival pattern for every candidate and
every probe. Built on the bench harness (bench/workloads.py sessions, bench/arrivals.py
gaps, bench/runner.py `LoadPlan`); traces are read by bakeoff/traces.py.

Arrivals are kept in *unit time*: offsets whose mean rate is 1 request/s. A probe at
rate r divides them by r, so every rate replays the same pattern (a trace's bursts stay
bursts) scaled to the candidates' capacity; `native_rate` is the trace's own rate, so
the time scale of a probe is native_rate / r.

Prompts are written in synthetic words (bench/sizing.py without a counter), never sized
against one candidate's tokenizer: the text is identical for every candidate, and each
runtime's usage reports what its tokenizer made of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from bakeoff.traces import MOONCAKE_BLOCK_TOKENS, TraceRow, read_trace
from bench import arrivals as arr
from bench.runner import LoadPlan
from bench.sizing import PromptSizer, words
from bench.workloads import Session, Turn


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TraceSpec(_Strict):
    path: Path
    format: Literal["azure", "mooncake", "sharegpt", "jsonl"]
    limit: int = Field(200, ge=1, le=1_000_000)  # rows read from the top of the file
    length_scale: float = Field(1.0, gt=0)  # multiplies every length (fit a small model's context)
    max_input_tokens: int = Field(4096, ge=1)
    max_output_tokens: int = Field(1024, ge=1)


class LengthMix(_Strict):
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    weight: float = Field(1.0, gt=0)


class Bursts(_Strict):
    """Every `period` requests, the first `length` arrive `factor` times as fast."""

    period: int = Field(ge=2)
    length: int = Field(ge=1)
    factor: float = Field(gt=1)


class GeneratorSpec(_Strict):
    requests: int = Field(60, ge=1, le=100_000)
    mix: list[LengthMix] = Field(default_factory=lambda: [LengthMix(input_tokens=128, output_tokens=32)], min_length=1)
    range_ratio: float = Field(0.0, ge=0, lt=1)
    tenants: dict[str, float] = Field(default_factory=lambda: {"default": 1.0}, min_length=1)
    shared_prefixes: int = Field(0, ge=0)  # distinct system prompts shared by sessions
    prefix_tokens: int = Field(256, ge=1)
    prefix_share: float = Field(0.5, ge=0, le=1)  # fraction of sessions that start with one
    turns: int = Field(1, ge=1, le=32)
    think_time_s: float = Field(0.0, ge=0)
    burstiness: float = Field(1.0, gt=0)  # gamma shape of the gaps: 1 Poisson, below 1 burstier
    bursts: Bursts | None = None

    @model_validator(mode="after")
    def _weights(self) -> GeneratorSpec:
        if any(w <= 0 for w in self.tenants.values()):
            raise ValueError("tenants: every weight must be > 0")
        if self.bursts is not None and self.bursts.length >= self.bursts.period:
            raise ValueError("bursts: length must be below period")
        return self


class WorkloadSpec(_Strict):
    trace: TraceSpec | None = None
    generator: GeneratorSpec | None = None
    ignore_eos: bool = True  # output lengths honoured where the runtime allows (docs/bakeoff.md)
    temperature: float = Field(0.0, ge=0)  # greedy by default: the same work on every candidate

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadSpec:
        if (self.trace is None) == (self.generator is None):
            raise ValueError("give exactly one of trace, generator")
        return self


@dataclass(frozen=True)
class Workload:
    sessions: tuple[Session, ...]
    unit_arrivals: tuple[float, ...]  # mean rate 1 request/s
    native_rate: float | None  # the trace's own mean rate (req/s); None for a generator
    description: str

    @property
    def tenants(self) -> list[str]:
        return sorted({s.tenant for s in self.sessions})

    @property
    def requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def plan_at(self, rate: float, seed: int, min_duration_s: float = 0.0) -> LoadPlan:
        """The open-loop plan at `rate` sessions/s: every session, then the workload again
        from its start (the same pattern, continued) until the arrivals span at least
        `min_duration_s`, so that a fast rate is still measured over a steady stretch."""
        sessions = list(self.sessions)
        unit = list(self.unit_arrivals)
        period = unit[-1] + 1.0  # one mean gap between the end of a pass and the next start
        passes = 1
        while unit[-1] / rate < min_duration_s:
            sessions += self.sessions
            unit += [t + passes * period for t in self.unit_arrivals]
            passes += 1
        return LoadPlan(sessions=sessions, arrivals=[t / rate for t in unit], seed=seed)

    def digest_rows(self) -> list[dict[str, Any]]:
        """What fixes the workload, row by row (for tests and the report's digest)."""
        return [
            {
                "at": round(t, 9),
                "tenant": s.tenant,
                "system": s.system,
                "turns": [(turn.content, turn.max_tokens) for turn in s.turns],
            }
            for t, s in zip(self.unit_arrivals, self.sessions)
        ]


def build(spec: WorkloadSpec, seed: int, base_dir: Path | None = None) -> Workload:
    """The workload of a plan (trace paths relative to `base_dir`, the plan's folder)."""
    if spec.trace is not None:
        path = spec.trace.path if spec.trace.path.is_absolute() or base_dir is None else base_dir / spec.trace.path
        return _from_trace(read_trace(path, spec.trace.format, spec.trace.limit), spec.trace, seed, path)
    assert spec.generator is not None
    return _generated(spec.generator, seed)


def _unit(offsets: list[float]) -> tuple[tuple[float, ...], float | None]:
    """Offsets rescaled to a mean rate of 1/s, and the rate they had."""
    span = offsets[-1] - offsets[0] if offsets else 0.0
    if len(offsets) < 2 or span <= 0:
        return tuple(float(i) for i in range(len(offsets))), None
    native = (len(offsets) - 1) / span
    return tuple((t - offsets[0]) * native for t in offsets), native


def _from_trace(rows: list[TraceRow], t: TraceSpec, seed: int, path: Path) -> Workload:
    rng = np.random.default_rng(seed)
    block_words = max(1, round(MOONCAKE_BLOCK_TOKENS * t.length_scale))
    blocks: dict[int, str] = {}
    sessions = []
    for i, row in enumerate(rows):
        n_in = min(t.max_input_tokens, max(1, round(row.input_tokens * t.length_scale)))
        n_out = min(t.max_output_tokens, max(1, round(row.output_tokens * t.length_scale)))
        history: list[dict[str, Any]] = []
        if row.messages:
            history, content = row.messages[:-1], str(row.messages[-1].get("content", ""))
        elif row.prompt is not None:
            content = row.prompt
        elif row.hash_ids:
            content = _blocks_text(row.hash_ids, blocks, block_words, seed, n_in) + f" request {i}"
        else:
            content = PromptSizer().text(rng, f"request {i}:", n_in).text
        turn = Turn(content, n_out, len(content.split()))
        sessions.append(Session([turn], tenant=row.tenant, extra={"history": history} if history else {}))
    stamps = [r.timestamp_s for r in rows]
    if any(s is None for s in stamps):
        offsets = arr.gamma_arrivals(len(rows), 1.0, seed=seed)
    else:
        offsets = arr.trace_arrivals(sorted(float(s) for s in stamps if s is not None))
    unit, native = _unit(offsets)
    return Workload(tuple(sessions), unit, native, f"{t.format} trace {path.name}, {len(rows)} rows")


def _blocks_text(ids: tuple[int, ...], cache: dict[int, str], block_words: int, seed: int, n_in: int) -> str:
    """Mooncake's hash ids as text: one fixed run of words per block id, so requests that
    share leading ids share a prefix; cut to the row's input length."""
    for h in ids:
        if h not in cache:
            cache[h] = words(np.random.default_rng([seed, h]), block_words)
    text = " ".join(cache[h] for h in ids).split()
    return " ".join(text[:n_in])


def _generated(g: GeneratorSpec, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    sizer = PromptSizer()
    weights = np.asarray([m.weight for m in g.mix], dtype=float)
    prefixes = [sizer.text(rng, f"system {p}:", g.prefix_tokens).text for p in range(g.shared_prefixes)]
    names = sorted(g.tenants)
    tenant_p = np.asarray([g.tenants[n] for n in names], dtype=float)
    sessions = []
    for i in range(g.requests):
        mix = g.mix[int(rng.choice(len(g.mix), p=weights / weights.sum()))]
        turns = []
        for k in range(g.turns):
            n_in = _spread(rng, mix.input_tokens, g.range_ratio)
            sized = sizer.text(rng, f"request {i} turn {k}:", n_in)
            turns.append(Turn(sized.text, _spread(rng, mix.output_tokens, g.range_ratio), sized.words))
        system = None
        if prefixes and rng.random() < g.prefix_share:
            system = prefixes[int(rng.integers(0, len(prefixes)))]
        tenant = names[int(rng.choice(len(names), p=tenant_p / tenant_p.sum()))]
        sessions.append(Session(turns, tenant=tenant, system=system, think_time_s=g.think_time_s))
    offsets = arr.gamma_arrivals(g.requests, 1.0, g.burstiness, seed=seed)
    if g.bursts is not None:
        offsets = _with_bursts(offsets, g.bursts)
    unit, _ = _unit(offsets)
    desc = f"generated: {g.requests} sessions x {g.turns} turn(s), {len(g.mix)} length mix(es), {len(names)} tenant(s)"
    return Workload(tuple(sessions), unit, None, desc)


def _spread(rng: np.random.Generator, mean: int, ratio: float) -> int:
    if ratio <= 0:
        return mean
    lo, hi = max(1, int(mean * (1 - ratio))), max(1, int(mean * (1 + ratio)))
    return int(rng.integers(lo, hi + 1))


def _with_bursts(offsets: list[float], b: Bursts) -> list[float]:
    gaps = np.diff(np.asarray(offsets, dtype=float))
    for i in range(len(gaps)):
        if (i + 1) % b.period < b.length:
            gaps[i] /= b.factor
    return [0.0, *np.cumsum(gaps).tolist()]
