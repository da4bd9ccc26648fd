"""The grammar hook inside the engine and the adapter: prefetch before the forward
pass, 400s before any generation, n>1, max_tokens cuts, completions."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from adapters.base import GenerationRequest, SamplingParams
from adapters.errors import GatewayError
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams as EngineParams
from tests.engine.structured_cases import MESSAGES, PERSON_SCHEMA, TOOLS, collect

PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}


class RecordingHook:
    """An allowed_tokens_fn that records when it is asked for what, and bans nothing."""

    def __init__(self, name: str, events: list, starter) -> None:
        self.name = name
        self.events = events
        self.starter = starter

    def prefetch(self, output_ids: list[int]):
        self.events.append(("prefetch", self.name, len(output_ids)))
        return self.starter

    def __call__(self, output_ids: list[int]):
        self.events.append(("call", self.name, len(output_ids)))
        return None


def person_request(request_id: str, **sampling) -> GenerationRequest:
    """A chat request for a person JSON (PERSON_FORMAT), sampled as `sampling` says."""
    return GenerationRequest(
        request_id, "tiny", messages=MESSAGES, response_format=PERSON_FORMAT, sampling=SamplingParams(**sampling)
    )


def test_engine_prefetches_each_mask_before_the_forward_pass(structured_dir, monkeypatch):
    engine = LLMEngine(str(structured_dir), num_blocks=64)
    events: list = []
    execute = engine.runner.execute

    def recording_execute(scheduled):
        events.append(("forward", None, None))
        return execute(scheduled)

    monkeypatch.setattr(engine.runner, "execute", recording_execute)

    def starter() -> None:  # shared by both requests, as GrammarMask's is
        events.append(("start", None, None))

    a, b = RecordingHook("a", events, starter), RecordingHook("b", events, starter)
    for name, hook in (("a", a), ("b", b)):
        engine.add_request(
            name, [5, 6, 7, 8], EngineParams(max_tokens=3, temperature=0.0, ignore_eos=True, allowed_tokens_fn=hook)
        )
    while engine.has_unfinished_requests():
        engine.step()
    steps: list[list] = [[]]
    for event in events:
        steps[-1].append(event)
        if event[0] == "call" and sum(e[0] == "call" for e in steps[-1]) == 2:
            steps.append([])
    assert steps[-1] == [] and len(steps) == 4
    for k, step in enumerate(steps[:3]):
        prefetches = sorted(e for e in step[:2])
        assert prefetches == [("prefetch", "a", k), ("prefetch", "b", k)]
        assert step[2:4] == [("start", None, None), ("forward", None, None)]  # one start per step, then the model
        assert sorted(step[4:]) == [("call", "a", k), ("call", "b", k)]


def test_bad_schema_is_a_400_before_any_generation(structured_adapter, monkeypatch):
    started: list[str] = []
    original = structured_adapter.async_engine.generate

    def recording_generate(request_id, *args, **kwargs):
        started.append(request_id)
        return original(request_id, *args, **kwargs)

    monkeypatch.setattr(structured_adapter.async_engine, "generate", recording_generate)
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}}}
    request = GenerationRequest("bad", "tiny", messages=MESSAGES, response_format=bad)
    with pytest.raises(GatewayError) as info:
        asyncio.run(collect(structured_adapter, request))
    err = info.value
    assert (err.status, err.code, err.param) == (400, "invalid_schema", "response_format")
    assert "uniqueItems" in err.message
    tools = json.loads(json.dumps(TOOLS))
    tools[0]["function"]["parameters"]["properties"]["unit"] = {"enum": []}
    with pytest.raises(GatewayError) as info:
        asyncio.run(
            collect(
                structured_adapter,
                GenerationRequest("bad2", "tiny", messages=MESSAGES, tools=tools, tool_choice="required"),
            )
        )
    assert (info.value.status, info.value.param) == (400, "tools[0].function.parameters")
    assert started == []


async def _choices(adapter, request):
    """(content, finish_reason) per choice index, from the adapter's events."""
    from adapters.base import Finish, TextDelta

    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    async for event in adapter.generate(request):
        if isinstance(event, TextDelta):
            texts[event.index] = texts.get(event.index, "") + event.text
        elif isinstance(event, Finish):
            finishes[event.index] = event.reason
    return texts, finishes


def test_every_choice_of_n_follows_the_schema(structured_adapter):
    request = person_request("n4", n=4, temperature=1.0, seed=7, max_tokens=128)
    texts, finishes = asyncio.run(_choices(structured_adapter, request))
    assert sorted(finishes) == [0, 1, 2, 3] and set(finishes.values()) == {"stop"}
    values = [json.loads(texts[i]) for i in range(4)]
    for value in values:
        jsonschema.validate(value, PERSON_SCHEMA)
    assert len({json.dumps(v) for v in values}) > 1, "n choices did not diverge"


def test_length_only_when_max_tokens_cut_it(structured_adapter):
    cut = person_request("cut", temperature=1.0, seed=1, max_tokens=5)
    answer = asyncio.run(collect(structured_adapter, cut))
    assert answer.finish_reason == "length" and answer.completion_tokens == 5
    assert answer.content and answer.content.startswith("{")
    whole = person_request("whole", temperature=1.0, seed=1, max_tokens=128)
    answer = asyncio.run(collect(structured_adapter, whole))
    assert answer.finish_reason == "stop" and answer.completion_tokens < 128
    jsonschema.validate(json.loads(answer.content), PERSON_SCHEMA)


def test_completions_follow_the_schema_too(structured_adapter):
    request = GenerationRequest(
        "c",
        "tiny",
        kind="completion",
        prompt="A person:",
        response_format=PERSON_FORMAT,
        sampling=SamplingParams(temperature=1.0, seed=3, max_tokens=128),
    )
    answer = asyncio.run(collect(structured_adapter, request))
    assert answer.finish_reason == "stop"
    jsonschema.validate(json.loads(answer.content), PERSON_SCHEMA)


def test_tool_choice_auto_and_none_stay_free_text(structured_adapter):
    for choice in ("auto", "none"):
        request = GenerationRequest(
            f"free-{choice}",
            "tiny",
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice=choice,
            sampling=SamplingParams(temperature=0.0, max_tokens=8),
        )
        answer = asyncio.run(collect(structured_adapter, request))
        assert answer.finish_reason == "length" and not answer.tool_calls
        assert not (answer.content or "").startswith("<tool_call>")


def test_background_overlap_gives_the_same_answers(structured_adapter, monkeypatch):
    """SWITCHYARD_GRAMMAR_OVERLAP=1 moves mask work to a worker thread; seeded answers must not change."""
    from engine.structured import mask_provider

    def answers() -> list:
        async def run():
            return await asyncio.gather(
                *(
                    collect(
                        structured_adapter,
                        person_request(f"o{seed}", temperature=1.0, seed=seed, max_tokens=128),
                    )
                    for seed in range(6)
                )
            )

        return [a.content for a in asyncio.run(run())]

    monkeypatch.setattr(mask_provider, "_batcher", mask_provider._StepBatcher(overlap=False))
    inline = answers()
    monkeypatch.setattr(mask_provider, "_batcher", mask_provider._StepBatcher(overlap=True))
    overlapped = answers()
    assert inline == overlapped
    for content in inline:
        jsonschema.validate(json.loads(content), PERSON_SCHEMA)
