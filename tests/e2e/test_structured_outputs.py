"""Structured output end to end: the official `openai` client -> gateway process ->
native engine on the tiny model. Every mode, streaming and not; the client's
`chat.completions.stream(...)` helper rebuilds every tool call; schema errors are
OpenAI-shaped 400s. The default run sends 6 seeded requests per mode and way; the
slow tier sends the issue's 50. Issue 13's forced tool calls: its reproduction and 12
seeded requests per forced mode and way, judged by tests/engine/tool_call_cases.py."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from engine.make_tiny import make_tiny
from engine.text.tokenizer import TextTokenizer
from tests.engine.structured_cases import (
    MESSAGES,
    MODE_IDS,
    MODES,
    TOOLS,
    Answer,
    Mode,
    check_answer,
    logit_bias_for,
)
from tests.engine.tool_call_cases import FORCED_MODES, REPRODUCTION, ToolMode, check_tool_answer
from tests.engine.tool_call_cases import MAX_TOKENS as TOOL_MAX_TOKENS
from tests.engine.tool_call_cases import MESSAGES as TOOL_MESSAGES
from tests.procs import native_backend_config, start_native_gateway, stopped_after

MAX_TOKENS = 128


@pytest.fixture(scope="module")
def tiny_dir(module_tmp):
    return make_tiny(module_tmp / "tiny")


@pytest.fixture(scope="module")
def native_gateway(module_tmp, tiny_dir):
    config = native_backend_config(tiny_dir, max_model_len=1024, num_blocks=1024, max_num_seqs=64)
    yield from stopped_after(start_native_gateway(module_tmp, config))


@pytest.fixture(scope="module")
def tok(tiny_dir) -> TextTokenizer:
    return TextTokenizer(tiny_dir)


def client_for(gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def request_fields(mode: Mode, seed: int, tok: TextTokenizer) -> dict:
    fields = {
        "model": "tiny",
        "messages": MESSAGES,
        "seed": seed,
        "temperature": 1.0,
        "max_tokens": MAX_TOKENS,
        **mode.request,
    }
    bias = logit_bias_for(mode, tok.token_bytes, tok.vocab_size)
    if bias:
        fields["logit_bias"] = {str(t): b for t, b in bias.items()}
    return fields


async def ask(client: openai.AsyncOpenAI, fields: dict) -> Answer:
    r = await client.chat.completions.create(**fields)
    message = r.choices[0].message
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
    return Answer(message.content, calls, r.choices[0].finish_reason, r.usage.completion_tokens)


async def ask_streaming(client: openai.AsyncOpenAI, fields: dict) -> Answer:
    """Rebuild the answer from raw chunks the way a client does by hand."""
    content, calls, finish, tokens = [], {}, None, None
    stream = await client.chat.completions.create(**fields, stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                if call.id:
                    assert entry["id"] is None, "tool-call id sent twice"
                    entry["id"] = call.id
                if call.function and call.function.name:
                    entry["name"] += call.function.name
                if call.function and call.function.arguments:
                    entry["arguments"] += call.function.arguments
            if choice.finish_reason:
                assert finish is None, "finish_reason sent twice"
                finish = choice.finish_reason
    assert all(c["id"] for c in calls.values()), "a tool call without an id"
    return Answer(
        "".join(content) or None, [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)], finish, tokens
    )


async def run_mode(gateway, tok, mode: Mode, count: int, streaming: bool) -> list[Answer]:
    client = client_for(gateway)
    try:
        way = ask_streaming if streaming else ask
        return await asyncio.gather(*(way(client, request_fields(mode, seed, tok)) for seed in range(count)))
    finally:
        await client.close()


def check_mode(gateway, tok, mode: Mode, count: int, streaming: bool) -> None:
    answers = asyncio.run(run_mode(gateway, tok, mode, count, streaming))
    for answer in answers:
        check_answer(mode, answer, MAX_TOKENS)


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_every_mode_parses_and_validates(native_gateway, tok, mode, streaming):
    check_mode(native_gateway, tok, mode, 6, streaming)


@pytest.mark.slow
@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_fifty_seeded_requests_per_mode(native_gateway, tok, mode, streaming):
    check_mode(native_gateway, tok, mode, 50, streaming)


def test_stream_helper_rebuilds_every_tool_call(native_gateway, tok):
    """`chat.completions.stream(...)` accumulates tool-call deltas itself: what it rebuilds
    must equal the raw chunks of the same seeded request, call for call."""
    mode = next(m for m in MODES if m.name == "parallel_calls")
    client = openai.OpenAI(base_url=native_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    multi = 0
    for seed in range(6):
        fields = request_fields(mode, seed, tok)
        done_events = []
        with client.chat.completions.stream(**fields) as stream:
            for event in stream:
                if event.type == "tool_calls.function.arguments.done":
                    done_events.append((event.name, event.arguments))
            final = stream.get_final_completion()
        rebuilt = [(c.function.name, c.function.arguments) for c in final.choices[0].message.tool_calls or []]
        raw = asyncio.run(run_raw(native_gateway, fields))
        assert rebuilt == raw.tool_calls == done_events
        assert final.choices[0].finish_reason == "tool_calls" and not final.choices[0].message.content
        check_answer(mode, Answer(None, rebuilt, "tool_calls"), MAX_TOKENS)
        multi += len(rebuilt) > 1
    assert multi, "no request made parallel calls; the helper's multi-call path went untested"


async def run_raw(gateway, fields: dict) -> Answer:
    client = client_for(gateway)
    try:
        return await ask_streaming(client, fields)
    finally:
        await client.close()


def test_named_tool_and_json_schema_in_one_request_answers_the_tool(native_gateway, tok):
    client = openai.OpenAI(base_url=native_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    r = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        tools=TOOLS,
        seed=1,
        max_tokens=MAX_TOKENS,
        tool_choice={"type": "function", "function": {"name": "ping"}},
        response_format={"type": "json_object"},
    )
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"  # OpenAI's word for a forced named function
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("ping", {})]


def test_max_tokens_cut_is_length(native_gateway, tok):
    client = openai.OpenAI(base_url=native_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    mode = next(m for m in MODES if m.name == "json_schema")
    r = client.chat.completions.create(**{**request_fields(mode, 0, tok), "max_tokens": 4})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 4


@pytest.mark.parametrize(
    "fields,param,words",
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(x"}}},
                    },
                }
            },
            "response_format",
            ["/properties/a", "unclosed"],
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
                    },
                }
            },
            "response_format",
            ["if", "then"],
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}},
                        },
                    }
                ],
                "tool_choice": "required",
            },
            "tools[0].function.parameters",
            ["nope"],
        ),
    ],
)
def test_schema_errors_are_openai_400s(native_gateway, fields, param, words):
    client = openai.OpenAI(base_url=native_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, **fields)
    error = info.value.body
    assert error["code"] == "invalid_schema" and error["param"] == param, error
    for word in words:
        assert word in error["message"], error


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
def test_completions_follow_the_schema(native_gateway, streaming):
    """Legacy completions take response_format too (sent as an extra field: the client's
    completions.create has no parameter for it). The adapter side is tested in
    tests/engine/test_structured_engine.py."""
    import jsonschema

    from tests.engine.structured_cases import PERSON_SCHEMA

    client = openai.OpenAI(base_url=native_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}}
    for seed in range(2):
        kwargs = dict(
            model="tiny", prompt="A person:", seed=seed, temperature=1.0, max_tokens=MAX_TOKENS, extra_body=body
        )
        if streaming:
            text, finish = "", None
            for chunk in client.completions.create(**kwargs, stream=True):
                for choice in chunk.choices:
                    text += choice.text or ""
                    finish = choice.finish_reason or finish
        else:
            r = client.completions.create(**kwargs)
            text, finish = r.choices[0].text, r.choices[0].finish_reason
        assert finish == "stop", (finish, text)
        jsonschema.validate(json.loads(text), PERSON_SCHEMA)


# ---- issue 13: forced tool calls never come back broken ---------------------------------


def tool_request_fields(mode: ToolMode, seed: int) -> dict:
    return {
        "model": "tiny",
        "messages": TOOL_MESSAGES,
        "seed": seed,
        "temperature": 1.0,
        "max_tokens": TOOL_MAX_TOKENS,
        **mode.fields,
    }


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
def test_the_issue_reproduction_through_the_gateway(native_gateway, streaming):
    """Issue 13's request, as the issue sent it: once two calls with the first cut at the
    `</tool_call>` inside its string and the rest of it in `content`."""

    async def run() -> Answer:
        client = client_for(native_gateway)
        try:
            return await (ask_streaming if streaming else ask)(client, {"model": "tiny", **REPRODUCTION})
        finally:
            await client.close()

    answer = asyncio.run(run())
    assert answer.finish_reason == "tool_calls" and not answer.content, answer
    assert len(answer.tool_calls) == 2, answer
    check_tool_answer(FORCED_MODES[0], answer, REPRODUCTION["max_tokens"])
    assert "</tool_call>" in json.loads(answer.tool_calls[0][1])["city"], answer


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("mode", FORCED_MODES, ids=[m.name for m in FORCED_MODES])
def test_forced_tool_calls_keep_the_promise(native_gateway, mode, streaming):
    async def run() -> list[Answer]:
        client = client_for(native_gateway)
        way = ask_streaming if streaming else ask
        try:
            return await asyncio.gather(*(way(client, tool_request_fields(mode, seed)) for seed in range(12)))
        finally:
            await client.close()

    for answer in asyncio.run(run()):
        check_tool_answer(mode, answer, TOOL_MAX_TOKENS)
