"""The eliminate stage on real processes: a good vLLM simulator behind its gateway keeps
every required feature and passes every MUST of the core profile; a simulator whose
usage miscounts is eliminated by the failing MUST, named; one without a tool parser is
eliminated by the tools feature; a spent budget is a skip, never a hang."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from bakeoff.stages import eliminate
from bakeoff.verdict import CandidateTarget
from tests.bakeoff.stages.candidates import candidate, outcomes

FEATURES = ["streaming", "tools", "structured_output", "logprobs", "long_context"]
BUDGET_S = 300.0


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Iterator[CandidateTarget]:
    tmp = tmp_path_factory.mktemp("eliminate-good")
    with candidate(tmp, "good", enable_auto_tool_choice=True, tool_call_parser="hermes") as target:
        yield target


async def test_a_good_candidate_keeps_every_feature_and_passes_every_must(good: CandidateTarget) -> None:
    settings = eliminate.Settings(features=FEATURES, long_context_tokens=2048)
    result = await eliminate.run(good, settings, BUDGET_S)
    seen = outcomes(result)
    assert {f"feature:{f}": "pass" for f in FEATURES}.items() <= seen.items()
    assert seen["conformance"] == "pass", result.checks
    assert result.passed and result.stage == "eliminate" and result.candidate == "good"
    served = next(c for c in result.checks if c.name == "served")
    assert served.outcome == "pass"
    assert [(b["name"], b["adapter"]) for b in served.evidence["backends"]] == [("sim", "vllm")]
    summary = next(c for c in result.checks if c.name == "conformance")
    assert summary.evidence["counts"]["MUST pass"] >= 30  # the core profile really ran


async def test_a_runtime_that_miscounts_usage_is_eliminated_by_the_must_it_breaks(tmp_path: Path) -> None:
    with candidate(tmp_path, "miscount", fault="usage_extra=1") as target:
        result = await eliminate.run(target, eliminate.Settings(), BUDGET_S)
    seen = outcomes(result)
    assert seen["conformance:usage.matches_max_tokens"] == "fail"
    assert seen["conformance"] == "fail" and "usage.matches_max_tokens" in next(
        c.detail for c in result.checks if c.name == "conformance"
    )
    assert not result.passed


async def test_a_stream_that_breaks_off_with_an_error_before_its_done_is_eliminated(tmp_path: Path) -> None:
    with candidate(tmp_path, "error-stream", fault="error_after=2") as target:
        settings = eliminate.Settings(features=["streaming"], only=["models."])
        result = await eliminate.run(target, settings, BUDGET_S)
    check = next(c for c in result.checks if c.name == "feature:streaming")
    assert check.outcome == "fail" and "error" in check.detail, check
    assert not result.passed


async def test_a_runtime_without_a_tool_parser_is_eliminated_when_tools_are_required(tmp_path: Path) -> None:
    with candidate(tmp_path, "no-tools") as target:
        settings = eliminate.Settings(features=["tools", "logprobs"], only=["models."])
        result = await eliminate.run(target, settings, BUDGET_S)
    seen = outcomes(result)
    assert seen["feature:tools"] == "fail" and seen["feature:logprobs"] == "pass"
    assert "tool-call-parser" in next(c.detail for c in result.checks if c.name == "feature:tools")
    assert not result.passed


async def test_a_spent_budget_skips_what_it_cannot_run_and_says_so(good: CandidateTarget) -> None:
    result = await eliminate.run(good, eliminate.Settings(features=["logprobs"]), budget_s=0.0)
    seen = outcomes(result)
    assert seen == {"served": "skip", "feature:logprobs": "skip", "conformance": "skip"}
    assert all("budget" in c.detail for c in result.checks)


async def test_a_check_cut_by_the_budget_is_not_run_rather_than_failed(tmp_path: Path) -> None:
    """A slow runtime (20 s to a first token) and a 6 s budget: a MUST's chat is cut
    by the budget and reaches no verdict, which is no MUST failure; the stage still ends
    near its budget."""
    with candidate(tmp_path, "slow", ttft_ms=20000) as target:
        settings = eliminate.Settings(only=["chat.response.schema"])  # a MUST that waits for an answer
        result = await eliminate.run(target, settings, budget_s=6.0)
    summary = next(c for c in result.checks if c.name == "conformance")
    assert summary.outcome == "skip" and summary.evidence["not_run"], result.checks
    assert not [c for c in result.checks if c.outcome == "fail"]
    assert result.seconds < 6.0 + 10.0  # bounded by its budget (a hang would be the 120 s check timeout)


async def test_a_gateway_that_does_not_serve_the_model_is_eliminated(good: CandidateTarget) -> None:
    elsewhere = replace(good, name="elsewhere", model="another-model")
    result = await eliminate.run(elsewhere, eliminate.Settings(only=["models."]), BUDGET_S)
    seen = outcomes(result)
    assert seen["served"] == "fail" and seen["conformance"] == "fail"
    assert "does not list 'another-model'" in next(c.detail for c in result.checks if c.name == "served")


def test_the_settings_are_strict() -> None:
    with pytest.raises(ValidationError):
        eliminate.Settings.model_validate({"featurs": ["tools"]})
    with pytest.raises(ValidationError, match="unknown conformance profile"):
        eliminate.Settings(profiles=["cor"])
    with pytest.raises(ValidationError):
        eliminate.Settings.model_validate({"features": ["telepathy"]})
