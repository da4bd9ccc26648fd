"""The runner's verdicts (only a clean return is a pass) and the three report
formats."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from conformance.check import Check
from conformance.context import Context
from conformance.report import render_html, render_markdown, write_reports
from conformance.result import Level, Skipped, Status
from conformance.runner import RunReport, run_check, run_checks
from conformance.target import Target, normalize_base_url
from tests.conformance.sample_checks import fails, passes

# Nothing listens here: these checks never make a request.
TARGET = Target(base_url="http://127.0.0.1:9", model="m", api_key="sk-secret")


async def skips(ctx: Context) -> None:
    raise Skipped("needs --api-key")


async def breaks(ctx: Context) -> None:
    raise KeyError("boom")


async def hangs(ctx: Context) -> None:
    await asyncio.sleep(30)


def check(fn, level: Level = Level.MUST) -> Check:
    return Check(f"t.{fn.__name__}", "test", level, "core", f"a check that {fn.__name__}", fn)


async def test_statuses() -> None:
    ctx = Context(TARGET)
    try:
        assert (await run_check(check(passes), ctx)).status is Status.PASS
        failed = await run_check(check(fails), ctx)
        assert failed.status is Status.FAIL and failed.evidence[0]["where"] == "chunk 3 choices[0].delta.role"
        skipped = await run_check(check(skips), ctx)
        assert skipped.status is Status.SKIP and "needs --api-key" in skipped.message
        errored = await run_check(check(breaks), ctx)
        assert errored.status is Status.ERROR and "KeyError" in errored.message
        assert (await run_check(check(hangs), ctx, timeout_s=0.05)).status is Status.ERROR
    finally:
        await ctx.aclose()


async def test_must_failures_count_errors_but_not_skips_or_should() -> None:
    report = await run_checks(
        TARGET, [check(passes), check(fails), check(skips), check(breaks), check(fails, Level.SHOULD)], ["core"]
    )
    assert [r.id for r in report.must_failures] == ["t.fails", "t.breaks"]
    assert report.counts()["MUST"] == {"pass": 1, "fail": 1, "skip": 1, "error": 1, "na": 0}
    assert report.counts()["SHOULD"]["fail"] == 1


async def test_reports(tmp_path: Path) -> None:
    report = await run_checks(TARGET, [check(passes), check(fails), check(skips)], ["core"])
    paths = write_reports(report, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["target"]["api_key"] == "<set>"  # secrets never reach a report
    assert "sk-secret" not in paths["json"].read_text() + paths["md"].read_text() + paths["html"].read_text()
    again = RunReport.from_dict(data)
    assert [(r.id, r.status) for r in again.results] == [(r.id, r.status) for r in report.results]

    md = render_markdown(report)
    assert "**FAIL**" in md and "role twice" in md and "`t.fails`" in md and "skipped: needs --api-key" in md

    page = render_html(report)
    assert "bad &lt;chunk&gt;" in page  # escaped, not markup
    assert "<script" not in page
    assert not re.search(r'(src|href)="?https?://', page)  # self-contained: no external assets
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page


def test_base_url_normalization() -> None:
    assert normalize_base_url("http://h:1") == "http://h:1/v1"
    assert normalize_base_url("http://h:1/v1/") == "http://h:1/v1"
