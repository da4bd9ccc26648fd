"""TGIDialect against TGI's own recordings (transcribed in tests/adapters/recordings/tgi,
each test citing the recording): served byte for byte by the replay server, or fed to
the decoder where the gateway never sends such a request (several prompts at once)."""

from __future__ import annotations

import json

import pytest

from adapters.base import Finish, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.errors import GatewayError
from adapters.http_adapter import HTTPAdapter
from adapters.tgi import TGIDialect
from tests.adapters.recorded import Recording, load, names, scripted
from tests.adapters.wire_samples import chat, collect, delivered

SCHEMA_FORMAT_KEYS = {"type", "value"}


def recording(name: str) -> Recording:
    return load("tgi", name)


def serve(replay, rec: Recording) -> HTTPAdapter:
    return HTTPAdapter(TGIDialect, "tgi-r", scripted(replay, rec), "meta-llama/Llama-3.1-8B-Instruct")


def tools_of(rec: Recording) -> list[dict]:
    return rec.request["body"]["tools"]


def test_every_recording_names_its_source() -> None:
    for name in names("tgi"):
        rec = recording(name)
        assert rec.source["repository"] == "huggingface/text-generation-inference"
        assert len(rec.source["commit"]) == 40 and rec.source["recording"].startswith("integration-tests/")
        assert (rec.events is None) != (rec.response is None)


async def test_chat_grammar(replay) -> None:
    rec = recording("chat_grammar")  # test_json_schema_constrain/test_json_schema_complex.json
    schema = rec.request["body"]["response_format"]["value"]["schema"]
    a = serve(replay, rec)
    events = await collect(
        a, chat(stream=False, response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    )
    await a.aclose()
    document = rec.response["choices"][0]["message"]["content"]
    assert events == [TextDelta(0, document), Finish(0, "stop"), Usage(37, 44)]
    sent = replay.bodies("/v1/chat/completions")[0]
    assert set(sent["response_format"]) == SCHEMA_FORMAT_KEYS and sent["response_format"]["value"] == schema


async def test_chat_grammar_stream(replay) -> None:
    rec = recording("chat_grammar_stream")  # test_json_schema_constrain/test_json_schema_stream.json
    a = serve(replay, rec)
    events = await collect(a, chat(response_format={"type": "json_object"}))
    await a.aclose()
    pieces = [c["choices"][0]["delta"]["content"] for c in rec.chunks[:-1]]
    assert events == [*(TextDelta(0, p) for p in pieces), Finish(0, "stop")]
    assert json.loads("".join(pieces))["lastName"] == "Hopper"


async def test_chat_stream_with_usage_chunk(replay) -> None:
    rec = recording("chat_stream_usage")  # test_completion_prompts/test_chat_hfhub_usage.json
    a = serve(replay, rec)
    events = await collect(a, chat(messages=rec.request["body"]["messages"]))
    await a.aclose()
    assert events == [TextDelta(0, "OK"), TextDelta(0, "!"), Finish(0, "stop"), Usage(39, 3)]


async def test_tool_call(replay) -> None:
    rec = recording("tool_call")  # test_tools_llama/test_flash_llama_grammar_tools_nostream.json
    a = serve(replay, rec)
    events = await delivered(a, chat(stream=False, tools=tools_of(rec)))
    await a.aclose()
    call = events[0]
    assert isinstance(call, ToolCallDelta) and call.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.arguments) == {"city": "Lyon", "unit": "celsius"}
    assert events[1:] == [Finish(0, "tool_calls"), Usage(501, 29)]


async def test_tool_call_stream_without_finish_chunk(replay) -> None:
    rec = recording("tool_call_stream")  # test_tools_llama/test_flash_llama_grammar_tools_choice_stream.json
    a = serve(replay, rec)
    events = await delivered(
        a, chat(tools=tools_of(rec), tool_choice={"type": "function", "function": {"name": "get_weather"}})
    )
    await a.aclose()
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].name == "get_weather" and calls[0].id.startswith("call_")
    assert all(c.id is None and c.name is None for c in calls[1:])
    assert json.loads("".join(c.arguments for c in calls)) == {"city": "Lyon", "unit": "celsius"}
    # TGI sent none: the adapter finishes it at [DONE] (`stop`: OpenAI's word for a named tool_choice)
    assert events[-1] == Finish(0, "stop")


async def test_no_tool_stream_is_text(replay) -> None:
    rec = recording("no_tool_stream")  # test_flash_llama_grammar_tools_insufficient_information_stream.json
    a = serve(replay, rec)
    events = await delivered(a, chat(tools=tools_of(rec), tool_choice="auto"))
    await a.aclose()
    text = "".join(c["choices"][0]["delta"]["content"] for c in rec.chunks)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
    assert events[-1] == Finish(0, "length")


async def test_completion(replay) -> None:
    rec = recording("completion")  # test_completion_prompts/test_flash_llama_completion_single_prompt.json
    a = serve(replay, rec)
    events = await collect(a, chat(stream=False, messages=None, kind="completion", prompt="What is a river?"))
    await a.aclose()
    assert events == [TextDelta(0, rec.response["choices"][0]["text"]), Finish(0, "length"), Usage(6, 10)]


def test_completion_of_several_prompts_decodes_by_index() -> None:
    rec = recording("completion_prompts")  # test_completion_prompts/test_flash_llama_completion_many_prompts.json
    a = TGIDialect("tgi-r", "m")
    events = a.decode_response(rec.response, chat=False)
    texts = {c["index"]: c["text"] for c in rec.response["choices"]}
    expected = []
    for choice in rec.response["choices"]:  # in the order TGI listed them: 1, 0, 3, 2
        expected += [TextDelta(choice["index"], texts[choice["index"]]), Finish(choice["index"], "length")]
    assert events == [*expected, Usage(22, 40)]


def test_stream_of_several_prompts_decodes_each_prompts_usage() -> None:
    rec = recording("completion_prompts_stream")  # ..._many_prompts_stream.json
    a = TGIDialect("tgi-r", "m")
    events = [e for chunk in rec.chunks for e in a.decode_chunk(chunk, chat=False)]
    finishes = [e for e in events if isinstance(e, Finish)]
    assert finishes == [Finish(i, "length") for i in range(4)]  # "" mid-stream is not a finish
    assert [e for e in events if isinstance(e, Usage)] == [Usage(6, 3), Usage(5, 3), Usage(8, 3), Usage(3, 3)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta) and e.index == 3) == "_ten()"


async def test_tools_with_grammar_is_a_400(replay) -> None:
    rec = recording("tools_with_grammar")  # test_grammar_response_format_llama.py (asserted answer)
    a = serve(replay, rec)
    with pytest.raises(GatewayError) as info:
        await collect(
            a, chat(stream=False, tools=tools_of(recording("tool_call")), response_format={"type": "json_object"})
        )
    await a.aclose()
    assert info.value.status == 400 and "mutually exclusive" in info.value.message


async def test_before_3_2_tool_call_stream(replay) -> None:
    rec = recording("v3.1/tool_call_stream")  # v3.1.1: test_tools_llama/test_flash_llama_grammar_tools_stream.json
    a = serve(replay, rec)
    events = await delivered(
        a, chat(tools=tools_of(rec), tool_choice={"type": "function", "function": {"name": "get_weather"}})
    )
    await a.aclose()
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].id.startswith("call_")
    assert json.loads(calls[0].arguments) == {"city": "Oslo", "unit": "celsius"}  # the EOS text is not arguments
    assert events[-1] == Finish(0, "stop")  # a named tool_choice: OpenAI's word


async def test_before_3_2_tool_call_object_arguments(replay) -> None:
    rec = recording("v3.1/tool_call")  # v3.1.1: test_tools_llama/test_flash_llama_grammar_tools.json
    a = serve(replay, rec)
    events = await delivered(a, chat(stream=False, tools=tools_of(rec)))
    await a.aclose()
    assert json.loads(events[0].arguments) == {"city": "Oslo", "unit": "celsius"}
    assert events[1:] == [Finish(0, "tool_calls"), Usage(615, 30)]


async def test_before_3_2_usage_on_the_last_token_chunk(replay) -> None:
    rec = recording("v3.1/chat_stream_usage")  # v3.1.1: ..._completion_stream_usage.json
    a = serve(replay, rec)
    events = await collect(a, chat(sampling=SamplingParams(max_tokens=10)))
    await a.aclose()
    assert events[-2:] == [Finish(0, "length"), Usage(40, 10)]
    assert len([e for e in events if isinstance(e, TextDelta)]) == len(rec.chunks)


async def test_before_3_2_no_tool_stream_ends_without_finish(replay) -> None:
    rec = recording("v3.1/no_tool_stream")  # v3.1.1: ..._insufficient_information_stream.json
    a = serve(replay, rec)
    events = await delivered(a, chat(tools=tools_of(rec), tool_choice="auto"))
    await a.aclose()
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "I am a helpful assistant"
    assert events[-1] == Finish(0, "stop")  # TGI sent none: the text ended at the no_tool content's closing quote
