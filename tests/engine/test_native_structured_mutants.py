"""adapters/native.py's structured output, on the tiny model (one engine for the module):
a JSON response_format puts the grammar over the model (even over a logit_bias forcing
a token) and "text" does not, a schema the grammar engine refuses is a 400 before any
generation, and forced tool calls ignore stop strings and stop tokens (they could only
cut a call in half)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from adapters.base import Finish, GenerationRequest, SamplingParams, TextDelta, ToolCallDelta
from adapters.errors import GatewayError
from engine.make_tiny import make_tiny
from tests.native_adapters import started_native

pytest.importorskip("llguidance")

NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "now", "parameters": NO_ARGS}}
BOOL_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "boolean"}},
    "required": ["a"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory):
    model_dir: Path = make_tiny(tmp_path_factory.mktemp("structured-edges") / "tiny")
    yield from started_native(model_dir, one_thread=True, num_blocks=48, max_model_len=512)


def request(**fields) -> GenerationRequest:
    sampling = fields.pop("sampling", {})
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("max_tokens", 40)
    return GenerationRequest(
        "r", "m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(**sampling), **fields
    )


def events_of(adapter, req: GenerationRequest) -> list:
    async def go() -> list:
        return [e async for e in adapter.generate(req)]

    return asyncio.run(go())


def text_of(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def forcing(adapter) -> dict:
    """A logit_bias that makes the model write "weather" over and over."""
    return {"logit_bias": {adapter.tokenizer.token_to_id("weather"): 100.0}, "max_tokens": 3}


def test_a_text_response_format_leaves_the_model_free(adapter) -> None:
    events = events_of(adapter, request(response_format={"type": "text"}, sampling=forcing(adapter)))
    assert text_of(events) == "weather" * 3


def test_a_json_schema_response_format_holds_the_model_to_it(adapter) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": BOOL_SCHEMA}}
    forced = events_of(adapter, request(response_format=fmt, sampling=forcing(adapter)))
    assert "weather" not in text_of(forced)
    whole = events_of(adapter, request(response_format=fmt))
    assert set(json.loads(text_of(whole))) == {"a"}


def test_a_schema_the_grammar_engine_refuses_is_a_400_naming_its_field(adapter) -> None:
    tool = {"type": "function", "function": {"name": "now", "parameters": ["a"]}}
    with pytest.raises(GatewayError) as info:
        events_of(adapter, request(tools=[tool], tool_choice="required"))
    assert (info.value.status, info.value.code) == (400, "invalid_schema")
    assert info.value.param == "tools[0].function.parameters"
    assert info.value.message == "tools[0].function.parameters must be a JSON schema object, got list"


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "now"}}])
def test_forced_calls_ignore_stop_strings_and_stop_tokens(adapter, tool_choice) -> None:
    tok = adapter.tokenizer
    (brace,) = tok.encode("{")
    sampling = {"stop": ["{", "now"], "stop_token_ids": [brace], "max_tokens": 80}
    events = events_of(adapter, request(tools=[TOOL], tool_choice=tool_choice, sampling=sampling))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [c.name for c in calls if c.name] == ["now"]
    assert "".join(c.arguments or "" for c in calls) == "{}"
    assert [e.reason for e in events if isinstance(e, Finish)] == ["tool_calls"]


def test_auto_tool_choice_keeps_stop_strings(adapter) -> None:
    base = text_of(events_of(adapter, request(tools=[TOOL], tool_choice="auto", sampling={"max_tokens": 8})))
    stop = base[2:4]
    events = events_of(adapter, request(tools=[TOOL], tool_choice="auto", sampling={"max_tokens": 8, "stop": [stop]}))
    assert text_of(events) == base[: base.index(stop)]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": [TOOL], "tool_choice": "required"}, "tool_choice"),
    ],
)
def test_without_the_grammar_library_structured_output_is_a_400_naming_its_field(adapter, monkeypatch, fields, param):
    monkeypatch.setitem(sys.modules, "engine.structured", None)  # as if llguidance were not installed
    with pytest.raises(GatewayError) as info:
        events_of(adapter, request(**fields))
    assert (info.value.status, info.value.param) == (400, param)
    assert info.value.message.startswith("structured output needs the grammar library: ")
    assert "engine.structured" in info.value.message


def test_a_response_format_without_a_type_leaves_the_model_free(adapter) -> None:
    events = events_of(adapter, request(response_format={}, sampling=forcing(adapter)))
    assert text_of(events) == "weather" * 3


@pytest.mark.parametrize("parallel", [True, False])
def test_forced_calls_are_one_unless_parallel_calls_are_allowed(adapter, parallel) -> None:
    # the model kept from ending wherever the grammar lets another call follow
    sampling = {"logit_bias": {i: -100.0 for i in adapter.async_engine.engine.eos_token_ids}, "max_tokens": 60}
    req = request(tools=[TOOL], tool_choice="required", parallel_tool_calls=parallel, sampling=sampling)
    events = events_of(adapter, req)
    calls = {e.tool_index for e in events if isinstance(e, ToolCallDelta)}
    assert len(calls) > 1 if parallel else calls == {0}
    # cut by max_tokens after whole calls: the grammar's reader answers with those, as if the model had stopped
    assert [e.reason for e in events if isinstance(e, Finish)] == ["tool_calls"]


def test_a_dropped_call_is_logged_with_the_generations_request_id(adapter, caplog) -> None:
    sampling = {"logit_bias": {adapter.tokenizer.token_to_id("</tool_call>"): 100.0}, "max_tokens": 1}
    req = request(tools=[TOOL], tool_choice="auto", sampling=sampling)
    req.request_id = "rid-9"
    with caplog.at_level("WARNING", logger="adapters.native_choice"):
        events = events_of(adapter, req)
    assert not any(isinstance(e, (TextDelta, ToolCallDelta)) for e in events)
    assert "request rid-9: dropped a malformed tool call (a closing tag outside a call)" in caplog.text
