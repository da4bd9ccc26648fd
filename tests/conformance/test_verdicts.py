"""Verdicts that do not mislead: a run whose MUST checks did not run is
INCOMPLETE, never PASS; a check that cannot apply to what the target is
declared to be is `na` (and sends nothing), never a failure; the reports list
failures and skips, with their evidence, before the full table."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conformance.capabilities import SIM_FAULTS, UnknownCapability, parse_features
from conformance.catalog import select
from conformance.check import Check
from conformance.context import Context
from conformance.matrix import ConfigError, Declaration, load_declarations, targets_from_config
from conformance.report import render_html, render_markdown
from conformance.result import Evidence, Level, Skipped, Status, Verdict
from conformance.runner import run_check, run_checks
from conformance.target import Target
from tests.conformance.sample_checks import fails, passes

# Nothing listens here: a check that sends a request errors, so `na` proves nothing was sent.
NOWHERE = "http://127.0.0.1:9"


async def skips(ctx: Context) -> None:
    raise Skipped(
        "the server refuses tools",
        [Evidence(expected="tools served", seen="HTTP 400", request={"method": "POST", "path": "/x", "body": {}})],
    )


async def sends(ctx: Context) -> None:
    await ctx.http.get("/models")


def check(fn, level: Level = Level.MUST, needs: tuple[str, ...] = (), name: str = "") -> Check:
    return Check(f"t.{name or fn.__name__}", "test", level, "core", f"rule of {fn.__name__}", fn, needs)


def verdict_of(*checks: Check, target: Target | None = None) -> Verdict:
    report = asyncio.run(run_checks(target or Target(NOWHERE, "m"), list(checks), ["core"]))
    return report.verdict


def test_verdict_rules() -> None:
    assert verdict_of(check(passes), check(passes, Level.SHOULD, name="p2")) is Verdict.PASS
    assert verdict_of(check(passes), check(fails)) is Verdict.FAIL
    assert verdict_of(check(fails), check(skips)) is Verdict.FAIL  # a failure outranks a skip
    # One MUST that applies but did not run: not a pass.
    assert verdict_of(check(passes), check(skips)) is Verdict.INCOMPLETE
    # A skipped SHOULD does not make a run incomplete.
    assert verdict_of(check(passes), check(skips, Level.SHOULD)) is Verdict.PASS
    # Every MUST not applicable: nothing was judged, so nothing passed.
    declared_without = Target(NOWHERE, "m", capabilities=frozenset())
    assert verdict_of(check(sends, needs=("tools",)), target=declared_without) is Verdict.INCOMPLETE
    # ... while `na` next to a MUST that passed is a pass.
    assert verdict_of(check(passes), check(sends, needs=("tools",)), target=declared_without) is Verdict.PASS


async def test_not_applicable_by_declared_capability_sends_nothing() -> None:
    needs_structured = check(sends, needs=("structured_output",))
    ctx = Context(Target(NOWHERE, "m", capabilities=frozenset({"tools"})))
    try:
        result = await run_check(needs_structured, ctx)
        assert result.status is Status.NA
        assert "declared without structured_output" in result.message
        assert ctx.http.exchanges == []
    finally:
        await ctx.aclose()
    # Undeclared capabilities are assumed: the check runs (and here errors, nothing listening).
    ctx = Context(Target(NOWHERE, "m"))
    try:
        assert (await run_check(needs_structured, ctx)).status is Status.ERROR
    finally:
        await ctx.aclose()


async def test_fault_checks_apply_only_to_declared_simulators() -> None:
    faults = select(["gateway"], ["faults."])
    assert faults and all(SIM_FAULTS in c.needs for c in faults)
    report = await run_checks(Target(NOWHERE, "m"), faults, ["gateway"])
    assert {r.status for r in report.results} == {Status.NA}
    assert "not declared a simulator" in report.results[0].message
    # Declared a simulator: the checks run (and error here, nothing listening).
    report = await run_checks(Target(NOWHERE, "m", sim_faults=True), faults[:1], ["gateway"])
    assert report.results[0].status is Status.ERROR


def test_structured_and_tools_checks_declare_their_feature() -> None:
    assert all(c.needs == ("structured_output",) for c in select(["structured"]))
    assert all(c.needs == ("tools",) for c in select(["tools"]))
    assert all(c.needs == () for c in select(["core"]))


def test_feature_lists_are_validated() -> None:
    assert parse_features("tools, structured_output") == {"tools", "structured_output"}
    assert parse_features("") == frozenset()
    with pytest.raises(UnknownCapability, match="unknown capability tool"):
        parse_features(["tool"])


CONFIG = {
    "models": {
        "sim": {"backends": [{"name": "sim-a", "adapter": "vllm", "url": "http://sim:1", "served_model": "m"}]},
        "real": {"backends": [{"name": "vllm-b", "adapter": "vllm", "url": "http://vllm:2", "served_model": "m"}]},
    }
}


def test_declarations_reach_gateway_and_direct_targets(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text("models:\n  sim:\n    simulator: true\n    capabilities: [tools]\n")
    declared = load_declarations(path, CONFIG)
    assert declared == {"sim": Declaration(True, frozenset({"tools"}))}
    targets = {t.name: t for t in targets_from_config(CONFIG, "http://gw:8", direct=True, declarations=declared)}
    for name in ("gateway/sim", "sim-a (direct vllm)"):
        assert targets[name].sim_faults and targets[name].capabilities == {"tools"}
    for name in ("gateway/real", "vllm-b (direct vllm)"):
        assert not targets[name].sim_faults and targets[name].capabilities is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models:\n  nope: {simulator: true}\n", "models.nope: not a model of the gateway config"),
        ("models:\n  sim: {capabilities: [grammar]}\n", "unknown capability grammar"),
        ("models:\n  sim: {simulator: yes please}\n", "simulator: expected true or false"),
        ("models:\n  sim: {faults: true}\n", "expected a mapping with keys from simulator, capabilities"),
        ("sim: {simulator: true}\n", "expected one `models:` mapping"),
        ("models: [\n", "not valid YAML"),
    ],
)
def test_bad_targets_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="targets") as info:
        load_declarations(path, CONFIG)
    assert message in str(info.value)


async def test_reports_list_failures_and_skips_first_with_evidence() -> None:
    target = Target(NOWHERE, "m", capabilities=frozenset({"tools"}))
    checks = [
        check(passes, name="a_pass"),
        check(skips, Level.SHOULD, name="b_should_skip"),
        check(fails, Level.SHOULD, name="c_should_fail"),
        check(sends, needs=("structured_output",), name="d_na"),
        check(skips, name="e_must_skip"),
        check(fails, name="f_must_fail"),
    ]
    report = await run_checks(target, checks, ["core"])
    md = render_markdown(report)
    attention, table = md.split("## All checks")
    assert "## Needs attention (4)" in attention
    # MUST before SHOULD, failures before skips; passes and n/a are only in the table.
    order = [attention.index(f"`t.{n}`") for n in ("f_must_fail", "e_must_skip", "c_should_fail", "b_should_skip")]
    assert order == sorted(order)
    assert "`t.a_pass`" not in attention and "`t.d_na`" not in attention and "`t.d_na`" in table
    # Each entry carries its rule and evidence: the request and the offending field.
    must_fail = attention[attention.index("`t.f_must_fail`") :]
    assert "rule: rule of fails" in must_fail and "chunk 3 choices[0].delta.role" in must_fail
    assert '"path": "/chat/completions"' in must_fail and '"role": "assistant"' in must_fail
    assert "Verdict: **FAIL**" in md and "optional features: tools" in md

    page = render_html(report)
    attention_html, table_html = page.split("<h2>All checks</h2>")
    order = [attention_html.index(f"t.{n}<") for n in ("f_must_fail", "e_must_skip", "c_should_fail", "b_should_skip")]
    assert order == sorted(order)
    assert "chunk 3 choices[0].delta.role" in attention_html and "/chat/completions" in attention_html
    assert "t.a_pass" not in attention_html and "t.d_na" in table_html
