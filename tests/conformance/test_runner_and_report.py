"""The runner's verdicts (only a clean return is a pass) and the three report
formats."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conformance.context import Context
from conformance.report import render_html, render_markdown, write_reports
from conformance.result import Level, Status
from conformance.runner import RunReport, run_check, run_checks
from conformance.target import Target, normalize_base_url
from tests.conformance.fake_checks import breaks, check, fails, hangs, passes, skips

# Nothing listens here: these checks never make a request.
TARGET = Target(base_url="http://127.0.0.1:9", model="m", api_key="sk-secret")


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
    assert "role twice in &lt;chunk 3&gt;" in page  # escaped, not markup
    assert "<script" not in page
    assert not re.search(r'(src|href)="?https?://', page)  # self-contained: no external assets
    assert page.startswith("<!DOCTYPE html>") and '<link rel="stylesheet" href="report.css">' in page
    assert paths["css"] == tmp_path / "report.css" and ".attention{" in paths["css"].read_text()


def test_base_url_normalization() -> None:
    assert normalize_base_url("http://h:1") == "http://h:1/v1"
    assert normalize_base_url("http://h:1/v1/") == "http://h:1/v1"
