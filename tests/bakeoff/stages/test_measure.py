"""The measure stage's sweep on a real vLLM simulator behind its own gateway, with scripted
slowdowns: the simulator's process is paused (SIGSTOP) for a while once it has seen a
given number of requests, as a runtime compiling on its first batches or a machine taken
by another job would stall it. A warm-up takes the first stall out of the first probe; a
failure that a rerun at the same rate does not repeat does not bound the knee; an
undetermined probe is run again twice as long, and the report says so."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from bakeoff.report import sweep_rows
from bakeoff.slo import SloSpec
from bakeoff.stages import measure
from bakeoff.verdict import CandidateTarget
from bakeoff.workload import GeneratorSpec, LengthMix, WorkloadSpec, build
from simulators.testing import SimulatorHandle
from tests.bakeoff.stages.candidates import simulated

BUDGET_S = 120.0
SESSIONS = 16
WORKLOAD = build(
    WorkloadSpec(generator=GeneratorSpec(requests=SESSIONS, mix=[LengthMix(input_tokens=16, output_tokens=8)])), 5
)
# 16 good of 16 passes at 0.8 (Wilson at 0.8 confidence: 0.91 and up); a stall of 2.5 s
# puts every request of a probe over the 500 ms TTFT bound.
LENIENT = SloSpec(ttft_ms=500, attainment=0.8, confidence=0.8)
STALL_S = 2.5
# One probe or two (4 then 8 sessions/s), nothing but the sweep unless a test asks.
BARE = {
    "start_rate": 4,
    "max_rate": 8,
    "growth": 2,
    "max_probes": 4,
    "min_probe_s": 0,
    "cold_warm": False,
    "warmup_requests": 0,
    "lengthen_undetermined": 0,
    "confirm_failures": 0,
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Iterator[tuple[CandidateTarget, SimulatorHandle]]:
    with simulated(tmp_path_factory.mktemp("measure"), "sim", ttft_ms=5, itl_ms=2, output_tokens=8) as both:
        yield both


@asynccontextmanager
async def stall_after(sim: SimulatorHandle, requests: int) -> AsyncIterator[None]:
    """Pause the simulator for STALL_S once it has seen `requests` more requests (0: from
    now, before the stage sends anything)."""

    async def watch() -> None:
        if requests:
            async with httpx.AsyncClient(base_url=sim.url, timeout=5) as client:
                start = (await client.get("/_sim/stats")).json()["requests_total"]
                while (await client.get("/_sim/stats")).json()["requests_total"] < start + requests:
                    await asyncio.sleep(0.01)
        os.kill(sim.process.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(STALL_S)
        finally:
            os.kill(sim.process.pid, signal.SIGCONT)

    task = asyncio.ensure_future(watch())
    await asyncio.sleep(0.1)  # the baseline is read before the stage sends anything
    try:
        yield
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        os.kill(sim.process.pid, signal.SIGCONT)


async def sweep(target: CandidateTarget, slo: SloSpec = LENIENT, **settings: Any) -> dict[str, Any]:
    inputs = measure.Inputs(workload=WORKLOAD, slo=slo, seed=5)
    result = await measure.run(target, measure.Settings(**{**BARE, **settings}), BUDGET_S, inputs)
    knee = next(c for c in result.checks if c.name == "knee")
    return {"knee": knee.evidence, "checks": {c.name: c for c in result.checks}}


@pytest.mark.parametrize("warmup", [3, 0])
async def test_a_warm_up_takes_the_first_requests_stall_out_of_the_first_probe(
    sim: tuple[CandidateTarget, SimulatorHandle], warmup: int
) -> None:
    target, handle = sim
    async with stall_after(handle, 0):  # the runtime's first requests stall (it compiles)
        got = await sweep(target, max_rate=4, warmup_requests=warmup)
    if warmup:
        assert got["knee"]["knee_rate"] == 4
        warm = got["checks"]["warmup"]
        assert warm.outcome == "pass" and [w["at_once"] for w in warm.evidence["waves"]] == [1, 2]
        assert warm.evidence["waves"][0]["ttft_ms"]["max"] >= STALL_S * 1000 * 0.5  # the stall was the warm-up's
    else:  # without it the stall lands in the first probe: no knee
        assert got["knee"]["knee_rate"] is None and got["knee"]["points"][0]["verdict"] == "fail"
        assert "warmup" not in got["checks"]


@pytest.mark.parametrize("confirm", [1, 0])
async def test_a_failure_the_rerun_does_not_repeat_does_not_bound_the_knee(
    sim: tuple[CandidateTarget, SimulatorHandle], confirm: int
) -> None:
    target, handle = sim
    async with stall_after(handle, SESSIONS + 1):  # the first request of the probe at 8/s
        got = await sweep(target, confirm_failures=confirm)
    points = got["knee"]["points"]
    assert [(p["rate"], p["verdict"]) for p in points][:2] == [(4, "pass"), (8, "fail")]
    if confirm:
        assert got["knee"]["knee_rate"] == 8 and got["knee"]["stop_reason"] == "max_rate_reached"
        assert points[1]["superseded"] and points[2]["rerun"] == "confirm" and points[2]["verdict"] == "pass"
        verdicts = [row[1] for row in sweep_rows(points)[1:]]
        assert verdicts[1:] == ["fail (run again: next row)", "pass (rerun to confirm a failure)"]
    else:
        # the stall's failure is believed: the search bisects below it
        assert got["knee"]["knee_rate"] < 8 and got["knee"]["lowest_non_pass"] == 8
        assert not any(p["superseded"] for p in points)


async def test_a_failure_repeated_by_its_rerun_is_believed(sim: tuple[CandidateTarget, SimulatorHandle]) -> None:
    target, _ = sim
    # a TTFT bound no request meets: the start rate fails twice, so there is no knee
    got = await sweep(target, slo=SloSpec(ttft_ms=0.001, attainment=0.8, confidence=0.8), confirm_failures=1)
    points = got["knee"]["points"]
    assert [(p["rate"], p["verdict"], p["rerun"]) for p in points] == [(4, "fail", None), (4, "fail", "confirm")]
    assert got["knee"]["knee_rate"] is None and got["knee"]["stop_reason"] == "fails_at_start"


@pytest.mark.parametrize("lengthen", [1, 0])
async def test_an_undetermined_probe_is_run_again_twice_as_long(
    sim: tuple[CandidateTarget, SimulatorHandle], lengthen: int
) -> None:
    target, _ = sim
    # 16 good of 16 cannot show 90% at 0.9 confidence (Wilson: 0.855 and up); 32 of 32 can
    strict = SloSpec(ttft_ms=500, attainment=0.9, confidence=0.9)
    got = await sweep(target, slo=strict, max_rate=4, lengthen_undetermined=lengthen)
    points = got["knee"]["points"]
    assert points[0]["verdict"] == "undetermined" and points[0]["judged"] == SESSIONS
    if lengthen:
        assert points[0]["superseded"] and points[1]["rerun"] == "longer"
        assert points[1]["verdict"] == "pass" and points[1]["judged"] >= 2 * SESSIONS
        assert got["knee"]["knee_rate"] == 4
        assert [row[1] for row in sweep_rows(points)[1:]] == [
            "undetermined (run again: next row)",
            "pass (rerun twice as long)",
        ]
    else:
        assert len(points) == 1 and got["knee"]["knee_rate"] is None


def test_the_rerun_policy() -> None:
    from bakeoff.knee import rerun

    assert rerun(["pass"], 1, 1) is None
    assert rerun(["undetermined"], 1, 0) == "longer"
    assert rerun(["undetermined", "undetermined"], 1, 1) is None  # two non-pass runs: believed
    assert rerun(["fail"], 1, 1) == "confirm" and rerun(["fail"], 1, 0) is None
    assert rerun(["fail", "fail"], 1, 1) is None
    assert rerun(["fail", "pass"], 1, 1) is None
    assert rerun(["undetermined"], 0, 1) == "confirm"
