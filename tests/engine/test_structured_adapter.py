"""Structured output through the native adapter on the tiny model: 50 seeded requests
per mode, all batched together in the engine, every answer parsed and validated."""

from __future__ import annotations

import asyncio

import pytest

from adapters.base import GenerationRequest, SamplingParams
from engine.text.tokenizer import TextTokenizer
from tests.engine.structured_cases import MESSAGES, MODE_IDS, MODES, Answer, Mode, check_answer, collect, logit_bias_for

REQUESTS_PER_MODE = 50
MAX_TOKENS = 128


def request_for(mode: Mode, seed: int, tok: TextTokenizer, **sampling) -> GenerationRequest:
    sampling = {
        "temperature": 1.0,
        "seed": seed,
        "max_tokens": MAX_TOKENS,
        "logit_bias": logit_bias_for(mode, tok.token_bytes, tok.vocab_size) or None,
        **sampling,
    }
    return GenerationRequest(
        f"{mode.name}-{seed}", "tiny", messages=MESSAGES, sampling=SamplingParams(**sampling), **mode.request
    )


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_fifty_seeded_requests_parse_and_validate(structured_adapter, structured_tok, mode: Mode):
    async def run() -> list[Answer]:
        return await asyncio.gather(
            *(collect(structured_adapter, request_for(mode, seed, structured_tok)) for seed in range(REQUESTS_PER_MODE))
        )

    answers = asyncio.run(run())
    for answer in answers:
        check_answer(mode, answer, MAX_TOKENS)
    if mode.name == "parallel_calls":
        assert max(len(a.tool_calls) for a in answers) > 1, "parallel_tool_calls never produced two calls"
    if mode.name == "tool_required":
        assert len({a.tool_calls[0][0] for a in answers}) > 1, "required always picked the same tool"
