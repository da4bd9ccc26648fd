"""The workload is fixed by the plan and its seed; probes scale its arrivals."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.workload import GeneratorSpec, TraceSpec, WorkloadSpec, build

FIXTURES = Path(__file__).parent / "fixtures"
MIXED = GeneratorSpec(
    requests=40,
    mix=[{"input_tokens": 30, "output_tokens": 8, "weight": 3}, {"input_tokens": 200, "output_tokens": 64}],
    tenants={"acme": 2, "beta": 1},
    shared_prefixes=3,
    prefix_tokens=50,
    turns=2,
    burstiness=0.5,
    bursts={"period": 10, "length": 3, "factor": 4},
)


def test_the_same_plan_and_seed_give_the_same_workload() -> None:
    a = build(WorkloadSpec(generator=MIXED), seed=11)
    b = build(WorkloadSpec(generator=MIXED), seed=11)
    assert a.digest_rows() == b.digest_rows()
    assert a.digest_rows() != build(WorkloadSpec(generator=MIXED), seed=12).digest_rows()


def test_a_generated_workload_has_its_tenants_prefixes_and_turns() -> None:
    w = build(WorkloadSpec(generator=MIXED), seed=5)
    assert w.tenants == ["acme", "beta"] and w.requests == 80
    systems = {s.system for s in w.sessions if s.system}
    assert 1 <= len(systems) <= 3
    assert all(len(s.turns) == 2 for s in w.sessions)


def test_unit_arrivals_average_one_per_second_and_scale_with_the_rate() -> None:
    w = build(WorkloadSpec(generator=MIXED), seed=5)
    assert w.unit_arrivals[-1] == pytest.approx(len(w.sessions) - 1)
    plan = w.plan_at(4.0, seed=5)
    assert plan.arrivals is not None
    assert plan.arrivals[-1] == pytest.approx(w.unit_arrivals[-1] / 4)


def test_a_trace_keeps_its_pattern_and_reports_its_own_rate() -> None:
    spec = WorkloadSpec(trace=TraceSpec(path=FIXTURES / "azure_conv.csv", format="azure", length_scale=0.1))
    w = build(spec, seed=0)
    assert w.native_rate == pytest.approx(5 / 11.424, rel=1e-3)
    # the same relative gaps as the trace's
    assert w.unit_arrivals[1] / w.unit_arrivals[-1] == pytest.approx(4.3145790 / 11.4239730, rel=1e-6)
    assert w.sessions[0].turns[0].max_tokens == 4  # 44 tokens x 0.1


def test_mooncake_blocks_become_shared_prefixes() -> None:
    spec = WorkloadSpec(trace=TraceSpec(path=FIXTURES / "mooncake.jsonl", format="mooncake", length_scale=0.05))
    w = build(spec, seed=0)
    first, second, third, fourth = (s.turns[0].content.split() for s in w.sessions)
    block = round(512 * 0.05)
    assert first[:block] == second[:block] == third[:block]  # hash id 0 leads all three
    assert first[: 2 * block] == third[: 2 * block] and first[block : 2 * block] != second[block : 2 * block]
    assert fourth[:block] != first[:block]


def test_trace_paths_are_relative_to_the_plan(tmp_path: Path) -> None:
    spec = WorkloadSpec(trace=TraceSpec(path=Path("bench.jsonl"), format="jsonl"))
    w = build(spec, seed=0, base_dir=FIXTURES)
    assert [s.tenant for s in w.sessions] == ["acme", "default", "beta"]
    assert w.sessions[2].extra["history"] == [{"role": "system", "content": "Be terse."}]
    with pytest.raises(ValueError, match="no such trace file"):
        build(spec, seed=0, base_dir=tmp_path)


def test_a_fast_probe_replays_the_workload_until_it_lasts_long_enough() -> None:
    w = build(WorkloadSpec(generator=GeneratorSpec(requests=10)), seed=1)
    plan = w.plan_at(10.0, seed=1, min_duration_s=3.0)
    assert plan.arrivals is not None and len(plan.sessions) == 40  # four passes of 10 sessions
    assert plan.arrivals[-1] >= 3.0
    assert plan.sessions[10] is w.sessions[0]
    gaps = [b - a for a, b in zip(plan.arrivals, plan.arrivals[1:])]
    assert min(gaps) >= 0  # the passes follow one another
    assert len(w.plan_at(1.0, seed=1, min_duration_s=3.0).sessions) == 10  # already long enough
