"""The comparable stage on real processes, each candidate a vLLM simulator behind its own
gateway, judged against a reference (live, or its recorded result read back from the
report's JSON, as the run passes it): the same runtime is comparable; one whose chat
template adds a default system message is not (its plain prompts still tokenize the
same); one whose greedy answers differ (another seed: another quality level) is ranked
apart; without a reference the probes are only recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bakeoff.stages import comparable
from bakeoff.verdict import CandidateTarget, StageResult
from tests.bakeoff.stages.candidates import candidate, outcomes

BUDGET_S = 120.0


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Iterator[CandidateTarget]:
    with candidate(tmp_path_factory.mktemp("comparable-ref"), "reference") as target:
        yield target


async def recorded(reference: CandidateTarget, settings: comparable.Settings) -> StageResult:
    """The reference's own comparable result, through the report's JSON and back."""
    own = await comparable.run(reference, settings, BUDGET_S)
    return StageResult.from_json(json.loads(json.dumps(own.to_json())))


async def test_the_same_runtime_is_comparable_on_every_check(reference: CandidateTarget, tmp_path: Path) -> None:
    with candidate(tmp_path, "twin") as twin:
        result = await comparable.run(twin, comparable.Settings(), BUDGET_S, reference)
    assert outcomes(result) == {
        "tokenization": "pass",
        "chat_template": "pass",
        "greedy": "pass",
        "output_length": "pass",
    }, result.checks
    by_name = {c.name: c for c in result.checks}
    assert by_name["tokenization"].evidence["by"] == "token ids (/tokenize)"
    assert "forced" in by_name["output_length"].detail  # the vLLM double takes ignore_eos
    assert by_name["output_length"].evidence["candidate"]["completion_tokens"] == 64


async def test_another_chat_template_is_not_comparable(reference: CandidateTarget, tmp_path: Path) -> None:
    stored = await recorded(reference, comparable.Settings())
    with candidate(tmp_path, "qwen-like", default_system_prompt="You are a helpful assistant.") as other:
        result = await comparable.run(other, comparable.Settings(), BUDGET_S, stored)
    seen = outcomes(result)
    assert seen["tokenization"] == "pass"  # the same tokenizer: only the template differs
    assert seen["chat_template"] == "fail"
    check = next(c for c in result.checks if c.name == "chat_template")
    assert "another chat template" in check.detail and "reference" in check.detail
    # The chat without a system message differs; the one with a system message does not.
    assert check.evidence["candidate"][0] == check.evidence["reference"][0]
    assert check.evidence["candidate"][1] > check.evidence["reference"][1]
    assert not result.passed


async def test_other_greedy_answers_are_another_quality_level_ranked_apart(
    reference: CandidateTarget, tmp_path: Path
) -> None:
    stored = await recorded(reference, comparable.Settings())
    with candidate(tmp_path, "reseeded", seed=7) as other:
        result = await comparable.run(other, comparable.Settings(), BUDGET_S, stored)
    seen = outcomes(result)
    assert seen["greedy"] == "warn" and seen["tokenization"] == seen["chat_template"] == "pass"
    check = next(c for c in result.checks if c.name == "greedy")
    assert "different quality level, ranked apart" in check.detail
    assert check.evidence["first"]["candidate"] != check.evidence["first"]["reference"]
    assert result.passed  # a warning ranks apart; it does not mark the candidate failed


async def test_without_a_reference_the_probes_are_recorded(reference: CandidateTarget) -> None:
    result = await comparable.run(reference, comparable.Settings(prompts=["one two three"]), BUDGET_S)
    assert outcomes(result) == {"reference": "pass", "output_length": "pass"}
    recorded = result.checks[0].evidence
    assert recorded["prompt_tokens"] == [3]  # the double's tokenizer: one token per word
    assert len(recorded["chat_tokens"]) == 2


async def test_a_reference_recorded_with_other_probes_is_not_compared(reference: CandidateTarget) -> None:
    stored = await recorded(reference, comparable.Settings(prompts=["one two three"]))
    result = await comparable.run(replace(reference, name="other"), comparable.Settings(), BUDGET_S, stored)
    assert outcomes(result) == {"reference": "skip"}
    assert "no probes recorded with these settings" in result.checks[0].detail


async def test_an_unreachable_reference_fails_the_probes_and_never_hangs(reference: CandidateTarget) -> None:
    gone = CandidateTarget(name="gone", runtime="vllm", gateway_url="http://127.0.0.1:9", model="m")
    result = await comparable.run(reference, comparable.Settings(), BUDGET_S, gone)
    assert outcomes(result) == {"probes": "fail"}
    assert "did not answer" in result.checks[0].detail


async def test_another_tokenizer_is_not_comparable(reference: CandidateTarget, tmp_path: Path) -> None:
    stored = await recorded(reference, comparable.Settings())
    # The engine source: the built-in tiny model's own tokenizer and chat template.
    with candidate(tmp_path, "engine", source="engine") as other:
        result = await comparable.run(other, comparable.Settings(), BUDGET_S, stored)
    seen = outcomes(result)
    assert seen["tokenization"] == "fail" and seen["chat_template"] == "fail", result.checks
    check = next(c for c in result.checks if c.name == "tokenization")
    assert "another tokenizer" in check.detail and check.evidence["by"] == "token ids (/tokenize)"
    assert not result.passed


async def test_without_tokenize_usage_counts_compare_and_unforced_lengths_are_said(tmp_path: Path) -> None:
    """TGI behind the gateway: no /tokenize and no ignore_eos or min_tokens."""
    with candidate(tmp_path, "tgi-ref", kind="tgi") as ref, candidate(tmp_path, "tgi", kind="tgi") as other:
        result = await comparable.run(other, comparable.Settings(), BUDGET_S, ref)
    assert outcomes(result) == dict.fromkeys(("tokenization", "chat_template", "greedy", "output_length"), "pass")
    by_name = {c.name: c for c in result.checks}
    assert by_name["tokenization"].evidence["by"] == "prompt token counts (usage)"
    assert by_name["chat_template"].evidence["by"] == "prompt token counts (usage)"
    length = by_name["output_length"]
    assert "not forced" in length.detail and "normalised per output token" in length.detail
    assert length.evidence["candidate"]["extensions_taken"] is False


def test_a_cut_utf8_sequence_at_the_end_is_not_another_quality_level() -> None:
    """The native engine shows a last token cut inside a UTF-8 sequence as U+FFFD; vLLM holds
    it back: the same tokens. Any other difference, at the end or not, still warns."""
    settings = comparable.Settings()
    ref = comparable.Answers(greedy=["ge\u01f9{v\ufffd\u007f\ufffd", "abc"])
    held_back = comparable.Answers(greedy=["ge\u01f9{v\ufffd\u007f", "abc"])
    assert comparable.greedy(held_back, ref, "native", settings).outcome == "pass"
    other_end = comparable.Answers(greedy=["ge\u01f9{v\ufffd\u007e", "abc"])
    other_middle = comparable.Answers(greedy=["ge\u01f9{w\ufffd\u007f\ufffd", "abc"])
    for mine in (other_end, other_middle):
        check = comparable.greedy(mine, ref, "native", settings)
        assert check.outcome == "warn" and check.evidence["differing"] == [0]
