"""Run checks one after another against one target.

Sequential on purpose: concurrent requests change a runtime's batches, and on
some runtimes batch composition changes greedy outputs, which would make the
stream-versus-non-stream comparisons flaky.
"""

from __future__ import annotations

import asyncio
import platform
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from conformance.capabilities import lacking_reason
from conformance.check import Check
from conformance.context import Context
from conformance.result import CheckFailed, CheckResult, Level, Skipped, Status, Verdict
from conformance.server_info import UNIDENTIFIED, ServerInfo, probe, server_info_from
from conformance.target import Target

SUITE_VERSION = "1"
CHECK_TIMEOUT_S = 120.0


@dataclass(slots=True)
class RunReport:
    target: dict[str, Any]
    profiles: list[str]
    started: str
    duration_s: float
    results: list[CheckResult] = field(default_factory=list)
    server: ServerInfo = UNIDENTIFIED  # the server's name and version, as it reports them

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {str(lv): {str(s): 0 for s in Status} for lv in Level}
        for r in self.results:
            out[str(r.level)][str(r.status)] += 1
        return out

    @property
    def must_failures(self) -> list[CheckResult]:
        """MUST checks that failed or could not reach a verdict (an error is not a pass)."""
        return [r for r in self.results if r.level is Level.MUST and r.status in (Status.FAIL, Status.ERROR)]

    @property
    def must_skips(self) -> list[CheckResult]:
        """MUST checks that applied to the target but did not run (`na` ones did not apply)."""
        return [r for r in self.results if r.level is Level.MUST and r.status is Status.SKIP]

    @property
    def verdict(self) -> Verdict:
        """FAIL on any MUST failure or error; otherwise INCOMPLETE when a MUST was
        skipped or no MUST reached a verdict at all; otherwise PASS."""
        if self.must_failures:
            return Verdict.FAIL
        ran = any(r.level is Level.MUST and r.status is Status.PASS for r in self.results)
        if self.must_skips or not ran:
            return Verdict.INCOMPLETE
        return Verdict.PASS

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite_version": SUITE_VERSION,
            "target": self.target,
            "profiles": self.profiles,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "environment": {"python": platform.python_version()},
            "server": self.server.to_dict(),
            "verdict": str(self.verdict),
            "summary": self.counts(),
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunReport:
        return cls(
            target=d.get("target", {}),
            profiles=list(d.get("profiles", [])),
            started=d.get("started", ""),
            duration_s=float(d.get("duration_s", 0.0)),
            results=[CheckResult.from_dict(r) for r in d.get("results", [])],
            server=server_info_from(d.get("server")),
        )


async def run_check(check: Check, ctx: Context, timeout_s: float = CHECK_TIMEOUT_S) -> CheckResult:
    start = time.perf_counter()
    lacking = [need for need in check.needs if ctx.target.lacks(need)]
    if lacking:
        # Decided from the declaration alone: nothing is sent to the server.
        message = "not applicable: " + "; ".join(lacking_reason(need) for need in lacking)
        return CheckResult(check.id, check.area, check.level, check.description, Status.NA, message, [], 0.0)
    status, message, evidence = Status.PASS, "", []
    try:
        async with asyncio.timeout(timeout_s):
            await check.fn(ctx)
    except CheckFailed as exc:
        status, message, evidence = Status.FAIL, exc.message, [e.to_dict() for e in exc.evidence]
    except Skipped as exc:
        status, message, evidence = Status.SKIP, f"skipped: {exc.reason}", [e.to_dict() for e in exc.evidence]
    except TimeoutError:
        status, message = Status.ERROR, f"no verdict within {timeout_s:.0f} s"
    except Exception as exc:  # a broken check or an unreachable server: no verdict, never a pass
        status = Status.ERROR
        message = f"{type(exc).__name__}: {exc}"
        evidence = [
            {
                "expected": "the check to reach a verdict",
                "seen": traceback.format_exc(limit=3)[-1500:],
                "where": "",
                "offending": None,
                "request": None,
            }
        ]
    return CheckResult(
        check.id,
        check.area,
        check.level,
        check.description,
        status,
        message,
        evidence,
        round(time.perf_counter() - start, 3),
    )


async def run_checks(target: Target, checks: list[Check], profiles: list[str], progress: Any = None) -> RunReport:
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    ctx = Context(target)
    report = RunReport(target=target.describe(), profiles=profiles, started=started, duration_s=0.0)
    report.server = await probe(target.base_url, target.api_key, target.extra_headers)
    try:
        for check in checks:
            result = await run_check(check, ctx)
            report.results.append(result)
            if progress is not None:
                progress(result)
    finally:
        await ctx.aclose()
    report.duration_s = time.perf_counter() - t0
    return report
