"""Finish words, decided once: each dialect maps its runtime's known words into the
OpenAI enum (or raises an abort or engine error as a failure) and passes an unknown
word through; the stream guard refuses it with a 502 error event, never a `stop`
(docs/architecture.md, "Stream rules and their one owner"). Replayed byte for byte
and read through the guard, as the gateway reads them."""

from __future__ import annotations

import pytest

from adapters.base import ErrorEvent, Finish, TextDelta
from adapters.http_adapter import HTTPAdapter
from adapters.llamacpp import LlamaCppDialect
from adapters.openai import OpenAIDialect
from adapters.openai_wire import normalize_finish
from adapters.sglang import SGLangDialect
from adapters.tgi import TGIDialect
from adapters.trtllm import TRTLLMDialect
from adapters.vllm import VLLMDialect
from tests.adapters.wire_samples import chat, delivered, json_response, sse, streamed

DIALECTS = [OpenAIDialect, VLLMDialect, SGLangDialect, TRTLLMDialect, TGIDialect, LlamaCppDialect]


def chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def adapter(replay, dialect) -> HTTPAdapter:
    url = replay.url + "/v1" if dialect is OpenAIDialect else replay.url
    return HTTPAdapter(dialect, "b-7", url, "m")


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.runtime)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_an_unknown_finish_word_ends_the_answer_with_a_502_never_a_stop(replay, dialect, stream):
    if stream:
        replay.reply(streamed(sse(chunk({"content": "Hi"})), sse(chunk({}, "max_output_reached")), sse("[DONE]")))
    else:
        message = {"role": "assistant", "content": "Hi"}
        answer = {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
        answer["choices"][0]["finish_reason"] = "max_output_reached"
        replay.reply(json_response(200, answer))
    a = adapter(replay, dialect)
    events = await delivered(a, chat(stream=stream))
    await a.aclose()
    assert events[0] == TextDelta(0, "Hi")
    assert not any(isinstance(e, Finish) for e in events)
    error = events[-1].error if isinstance(events[-1], ErrorEvent) else None
    assert error is not None, events
    assert (error.status, error.code) == (502, "upstream_error")
    assert "'max_output_reached'" in error.message and "b-7" not in error.message


@pytest.mark.parametrize(("word", "reason"), [("eos_token", "stop"), ("stop_sequence", "stop"), ("repetition", "stop")])
async def test_a_runtimes_known_word_is_a_clean_finish(replay, word, reason):
    replay.reply(streamed(sse(chunk({"content": "Hi"})), sse(chunk({}, word)), sse("[DONE]")))
    a = adapter(replay, VLLMDialect)
    events = await delivered(a, chat())
    await a.aclose()
    assert events == [TextDelta(0, "Hi"), Finish(0, reason)]


@pytest.mark.parametrize("word", ["some_new_reason", "STOP", "max_tokens", 7])
def test_the_decoder_passes_an_unknown_word_through_for_the_guard(word):
    assert normalize_finish(word, "b") == str(word)
