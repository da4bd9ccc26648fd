"""Issue 13's tool-call promise on the real engine and the tiny model, through the native
adapter: many seeded requests per mode (forced and auto), all checked by one oracle
(tests/engine/tool_call_cases.py), and the issue's exact reproduction."""

from __future__ import annotations

import asyncio
import json
import logging

import jsonschema
import pytest

from adapters.base import GenerationRequest, SamplingParams
from engine.text.tokenizer import TextTokenizer
from tests.engine.structured_cases import Answer, collect
from tests.engine.tool_call_cases import (
    AUTO_MODE,
    FORCED_MODES,
    MAX_TOKENS,
    MESSAGES,
    PARAMETERS,
    REPRODUCTION,
    ToolMode,
    check_tool_answer,
)

FAST_SEEDS = 50
SLOW_SEEDS = 300


def request_for(mode: ToolMode, seed: int, **sampling) -> GenerationRequest:
    sampling = {"temperature": 1.0, "seed": seed, "max_tokens": MAX_TOKENS, **sampling}
    return GenerationRequest(
        f"{mode.name}-{seed}", "tiny", messages=MESSAGES, sampling=SamplingParams(**sampling), **mode.fields
    )


def run_all(adapter, requests: list[GenerationRequest]) -> list[Answer]:
    async def run() -> list[Answer]:
        return await asyncio.gather(*(collect(adapter, r) for r in requests))

    return asyncio.run(run())


def auto_bias(tok: TextTokenizer) -> dict[int, float]:
    """Lean a random model towards writing tool calls, so the free-text parser meets many
    (mostly malformed) ones."""
    bias = {t: 2.0 for t in range(tok.vocab_size) if tok.token_bytes(t) in (b"{", b"}", b'"', b'{"', b'"}')}
    bias[tok.token_to_id("<tool_call>")] = 6.0
    bias[tok.token_to_id("</tool_call>")] = 3.0
    return bias


def test_the_issue_reproduction_comes_back_as_valid_calls(structured_adapter) -> None:
    fields = dict(REPRODUCTION)
    sampling = SamplingParams(seed=fields.pop("seed"), max_tokens=fields.pop("max_tokens"))
    answer = run_all(structured_adapter, [GenerationRequest("repro", "tiny", sampling=sampling, **fields)])[0]
    assert answer.finish_reason == "tool_calls" and answer.content is None, answer
    assert len(answer.tool_calls) == 2, answer
    for name, arguments in answer.tool_calls:
        assert name == "get_weather"
        jsonschema.validate(json.loads(arguments), PARAMETERS[name])
    # The case the issue met: the closing tag inside the first call's string.
    assert "</tool_call>" in json.loads(answer.tool_calls[0][1])["city"], answer


@pytest.mark.parametrize("mode", FORCED_MODES, ids=[m.name for m in FORCED_MODES])
def test_forced_calls_parse_and_validate_over_many_seeds(structured_adapter, mode: ToolMode) -> None:
    answers = run_all(structured_adapter, [request_for(mode, seed) for seed in range(FAST_SEEDS)])
    for answer in answers:
        check_tool_answer(mode, answer, MAX_TOKENS)
    # The property is about answers that were not cut: there must be some.
    assert sum(a.finish_reason == "tool_calls" for a in answers) >= FAST_SEEDS // 4, answers


@pytest.mark.slow
@pytest.mark.parametrize("mode", FORCED_MODES, ids=[m.name for m in FORCED_MODES])
def test_forced_calls_parse_and_validate_over_more_seeds(structured_adapter, mode: ToolMode) -> None:
    for first in range(0, SLOW_SEEDS, 60):
        for answer in run_all(structured_adapter, [request_for(mode, s) for s in range(first, first + 60)]):
            check_tool_answer(mode, answer, MAX_TOKENS)


def test_auto_calls_are_never_broken_nor_markup(structured_adapter, structured_tok, caplog) -> None:
    bias = auto_bias(structured_tok)
    with caplog.at_level(logging.WARNING, logger="adapters.native"):
        answers = run_all(
            structured_adapter, [request_for(AUTO_MODE, seed, logit_bias=bias) for seed in range(FAST_SEEDS)]
        )
    for answer in answers:
        check_tool_answer(AUTO_MODE, answer, MAX_TOKENS)
    # The biased model writes tags: the parser met malformed calls and dropped them.
    assert "dropped a malformed tool call" in caplog.text


def test_stop_strings_and_stop_tokens_cannot_cut_a_forced_call(structured_adapter, structured_tok) -> None:
    # Every call has quotes: a stop on '"' would cut each one in half if it applied.
    quote = structured_tok.token_to_id('"')
    mode = FORCED_MODES[0]
    requests = [request_for(mode, seed, stop=['"', "</tool_call>"], stop_token_ids=[quote]) for seed in range(10)]
    answers = run_all(structured_adapter, requests)
    for answer in answers:
        check_tool_answer(mode, answer, MAX_TOKENS)
    assert all(a.tool_calls for a in answers)


def test_required_calls_cut_by_max_tokens_never_send_a_broken_further_call(structured_adapter) -> None:
    # Issue 26: with parallel calls a second call that max_tokens cuts came back with
    # unfinished arguments. Budgets around one call's size cut many second calls.
    mode = FORCED_MODES[0]  # "required", parallel calls allowed
    requests = [request_for(mode, seed, max_tokens=budget) for seed in range(20) for budget in (30, 45, 60)]
    answers = run_all(structured_adapter, requests)
    for request, answer in zip(requests, answers):
        check_tool_answer(mode, answer, request.sampling.max_tokens)
        for _, arguments in answer.tool_calls[1:]:
            json.loads(arguments)  # every call after the first is whole
    assert any(len(a.tool_calls) > 1 for a in answers) or any(a.finish_reason == "tool_calls" for a in answers)
