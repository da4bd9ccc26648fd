"""`switchyard bakeoff run`: the stages in order for each candidate, one candidate at a
time (each alone on the machine, so none measures another's load), each stage within its
budget and the whole run within `budget_s`.

Order: eliminate -> comparable -> measure -> production. A candidate that fails
eliminate is not measured (nor checked further); a failed comparability check is
reported and ranks it apart, but it is still measured. Its runtime and gateway are started
before its first stage and stopped after its last (bakeoff/launch.py); SIGTERM and SIGINT
unwind the same way, so no child outlives the command.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bakeoff import conditions, launch
from bakeoff.plan import Candidate, Plan
from bakeoff.stages import comparable, eliminate, measure, production
from bakeoff.verdict import CandidateTarget, Check, StageResult
from bakeoff.workload import Workload, build
from bench.metrics import DEFINITIONS

REPORT_KIND = "switchyard-bakeoff"
STAGES = ("eliminate", "comparable", "measure", "production")
StageCall = Callable[[CandidateTarget, float], Awaitable[StageResult]]


class Stopped(BaseException):
    """SIGTERM or SIGINT: unwind, stopping every child on the way out."""


def _stage_call(stage: str, plan: Plan, inputs: measure.Inputs, reference: StageResult | None) -> StageCall:
    """The stage bound to its plan section: `comparable` against the reference's own
    recorded result (None: this candidate is the reference)."""
    if stage == "eliminate":
        settings = plan.eliminate_settings()
        return lambda target, budget_s: eliminate.run(target, settings, budget_s)
    if stage == "comparable":
        return lambda target, budget_s: comparable.run(target, plan.comparable, budget_s, reference)
    if stage == "production":
        return lambda target, budget_s: production.run(target, plan.production, budget_s)
    return lambda target, budget_s: measure.run(target, plan.measure, budget_s, inputs)


async def _bounded(stage: str, call: StageCall, target: CandidateTarget, budget_s: float) -> StageResult:
    """The stage's own result, or one failed check when it overran its budget or raised."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(budget_s + 5.0):  # the stage bounds itself; this catches one that does not
            return await call(target, budget_s)
    except TimeoutError:
        check = Check("budget", "fail", f"the stage did not end within its {budget_s:g} s budget")
    except Exception as exc:  # a stage's bug is reported against the candidate, never crashes the run
        check = Check("error", "fail", f"{type(exc).__name__}: {exc}")
    return StageResult(stage, target.name, (check,), seconds=time.perf_counter() - started)  # type: ignore[arg-type]


def _skipped(stage: str, name: str, why: str) -> StageResult:
    return StageResult(stage, name, (Check(stage, "skip", why),))  # type: ignore[arg-type]


async def _candidate(
    c: Candidate,
    plan: Plan,
    workload: Workload,
    references: dict[str, StageResult],
    work: Path,
    deadline: float,
    progress: bool,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": c.name,
        "backend": c.backend,
        "launch": c.launch.model_dump() if c.launch else None,
        "status": "not_run",
        "error": None,
        "conditions": None,
        "stages": [],
    }
    with ExitStack() as stack:
        starting = asyncio.ensure_future(
            asyncio.to_thread(launch.start, c, plan, workload.tenants, work / c.name, stack)
        )
        try:
            up = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # A thread cannot be cancelled: let the start finish, so that what it started is
            # on the stack when the stack is closed.
            await asyncio.gather(starting, return_exceptions=True)
            raise
        except launch.NotInstalled as exc:
            entry["status"], entry["error"] = "skipped", str(exc)
            return entry
        except Exception as exc:
            entry["status"], entry["error"] = "failed_to_start", f"{type(exc).__name__}: {exc}"[-2000:]
            return entry
        target = up.target
        inputs = measure.Inputs(
            workload, plan.slo, plan.seed, up.api_keys, plan.workload.ignore_eos, plan.workload.temperature, progress
        )
        entry["conditions"] = await conditions.record(
            gateway_url=target.gateway_url,
            runtime_url=target.runtime_url,
            runtime_kind=target.runtime,
            config_path=Path(target.config_path or ""),
            backend=up.backend,
            launch=entry["launch"],
            model_dir=up.model_dir,
            api_key=target.api_key,
        )
        entry["status"] = "measured"
        for stage in STAGES:
            left = deadline - time.perf_counter()
            call = _stage_call(stage, plan, inputs, references.get("comparable"))
            if left <= 0:
                result = _skipped(stage, c.name, "the run's budget_s ran out before this stage")
            else:
                _say(f"[{c.name}] {stage} ...", progress)
                result = await _bounded(stage, call, target, min(getattr(plan.budgets, stage), left))
            entry["stages"].append(result.to_json())
            if stage == "comparable" and "comparable" not in references and result.checks:
                references["comparable"] = result  # the first candidate compared is everyone's reference
            _say(f"[{c.name}] {stage}: {_line(result)}", progress)
            if stage == "eliminate" and not result.passed:
                entry["status"] = "eliminated"
                for later in STAGES[STAGES.index(stage) + 1 :]:
                    entry["stages"].append(_skipped(later, c.name, "eliminated").to_json())
                break
    return entry


def _line(result: StageResult) -> str:
    counts = {o: sum(1 for ch in result.checks if ch.outcome == o) for o in ("pass", "fail", "warn", "skip")}
    failed = "; ".join(f"{ch.name}: {ch.detail}" for ch in result.failed)
    return ", ".join(f"{n} {o}" for o, n in counts.items() if n) + (f" ({failed})" if failed else "")


def _say(text: str, enabled: bool) -> None:
    if enabled:
        print(text, file=sys.stderr, flush=True)


async def run_plan(plan: Plan, plan_text: str, base_dir: Path, progress: bool = True) -> dict[str, Any]:
    """Every candidate through every stage; the report's JSON document."""
    started = time.perf_counter()
    deadline = started + plan.budget_s
    workload = build(plan.workload, plan.seed, base_dir)
    references: dict[str, StageResult] = {}
    work = Path(tempfile.mkdtemp(prefix="bakeoff-"))
    candidates = []
    for c in plan.candidates:
        candidates.append(await _candidate(c, plan, workload, references, work, deadline, progress))
    rows = workload.digest_rows()
    return {
        "kind": REPORT_KIND,
        "version": 1,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - started,
        "plan": plan.model_dump(mode="json"),
        "plan_sha256": hashlib.sha256(plan_text.encode()).hexdigest(),
        "workload": {
            "description": workload.description,
            "sessions": len(workload.sessions),
            "requests": workload.requests,
            "tenants": workload.tenants,
            "native_rate": workload.native_rate,
            "sha256": hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest(),
        },
        "definitions": {
            **DEFINITIONS,
            "TTFT (bake-off)": "measured by the client of each candidate's gateway: it includes the gateway "
            "(admission, routing), the runtime's queue and prefill, and loopback transfer",
            "rate": "sessions started per second (open loop); a probe replays the whole workload at that rate",
            "knee": "the highest probed rate whose Wilson interval of SLO attainment lies at or above the target, "
            "with the failure rate (and ITL p99, when bounded) within the SLO",
        },
        "logs": str(work),
        "candidates": candidates,
    }


async def _stoppable(plan: Plan, plan_text: str, base_dir: Path, progress: bool) -> dict[str, Any]:
    """`run_plan`, cancelled by SIGTERM or SIGINT: the cancellation unwinds every candidate's
    `ExitStack`, stopping its runtime and gateway, and ends as `Stopped`."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    got: list[str] = []

    def stop(sig: signal.Signals) -> None:
        got.append(sig.name)
        task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await run_plan(plan, plan_text, base_dir, progress)
    except asyncio.CancelledError:
        if got:
            raise Stopped(got[0]) from None
        raise
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def run(plan: Plan, plan_text: str, base_dir: Path, progress: bool = True) -> dict[str, Any]:
    return asyncio.run(_stoppable(plan, plan_text, base_dir, progress))
