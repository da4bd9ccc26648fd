"""Structured output through the native adapter on the tiny model: 50 seeded requests
per mode, all batched together in the engine, every answer parsed and validated."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from adapters.base import Finish, GenerationRequest, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.native import NativeAdapter
from engine.make_tiny import make_tiny
from engine.tokenizer import TextTokenizer
from tests.engine.test_structured_cases import MESSAGES, MODE_IDS, MODES, Answer, Mode, check_answer, logit_bias_for

REQUESTS_PER_MODE = 50
MAX_TOKENS = 128


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("structured") / "tiny")


@pytest.fixture(scope="module")
def adapter(model_dir: Path):
    # 50 sequences of a tiny model: one intra-op thread is several times faster than
    # two on a shared 2-core machine, and the test is about the answers, not speed.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    adapter = NativeAdapter(
        "local", str(model_dir), engine_options={"max_num_seqs": 64, "num_blocks": 1024, "max_model_len": 1024}
    )
    asyncio.run(adapter.start())
    yield adapter
    asyncio.run(adapter.aclose())
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tok(model_dir: Path) -> TextTokenizer:
    return TextTokenizer(model_dir)


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


async def collect(adapter: NativeAdapter, request: GenerationRequest) -> Answer:
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    finish = None
    tokens = None
    async for event in adapter.generate(request):
        if isinstance(event, TextDelta):
            content.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = calls.setdefault(event.tool_index, ["", ""])
            if event.name:
                assert not call[0], "a tool call's name was sent twice"
                call[0] = event.name
            call[1] += event.arguments or ""
        elif isinstance(event, Finish):
            assert finish is None, "two finish events for one choice"
            finish = event.reason
        elif isinstance(event, Usage):
            tokens = event.completion_tokens
    assert finish is not None
    return Answer("".join(content) or None, [tuple(calls[i]) for i in sorted(calls)], finish, tokens)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_fifty_seeded_requests_parse_and_validate(adapter, tok, mode: Mode):
    async def run() -> list[Answer]:
        return await asyncio.gather(
            *(collect(adapter, request_for(mode, seed, tok)) for seed in range(REQUESTS_PER_MODE))
        )

    answers = asyncio.run(run())
    for answer in answers:
        check_answer(mode, answer, MAX_TOKENS)
    if mode.name == "parallel_calls":
        assert max(len(a.tool_calls) for a in answers) > 1, "parallel_tool_calls never produced two calls"
    if mode.name == "tool_required":
        assert len({a.tool_calls[0][0] for a in answers}) > 1, "required always picked the same tool"
