"""TRTLLMDialect against what TensorRT-LLM's own test suite asserts about its answers (see recorded.py)."""

from __future__ import annotations

from adapters.base import TextDelta
from adapters.http_adapter import HTTPAdapter
from adapters.trtllm import TRTLLMDialect
from tests.adapters.recorded import Recording, assert_every_recording_cites_its_test, load, scripted
from tests.adapters.wire_samples import chat, collect_refusal, refusal

RUNTIME = "trtllm"


def recording(name: str) -> Recording:
    return load(RUNTIME, name)


def serve(replay, rec: Recording) -> HTTPAdapter:
    return HTTPAdapter(TRTLLMDialect, "trt-r", scripted(replay, rec), "test-model")


def test_every_recording_names_its_source() -> None:
    assert_every_recording_cites_its_test(RUNTIME, "NVIDIA/TensorRT-LLM", "tests/unittest/")


async def test_context_length_in_openais_words(replay) -> None:
    rec = recording("context_length")  # test_context_length_error.py::test_error_response_carries_machine_readable_code
    error = await collect_refusal(serve(replay, rec), chat(stream=False))
    assert (error.status, error.code, error.param) == (400, "context_length_exceeded", "messages")
    assert error.message == rec.source["asserted"]["message"]
    # Streamed requests get the same JSON 400 (refused before the stream starts).
    error = await collect_refusal(serve(replay, rec), chat())
    assert error.code == "context_length_exceeded"


async def test_other_request_errors_stay_the_clients(replay) -> None:
    rec = recording("bad_request")  # test_context_length_error.py::test_error_response_default_code_unchanged
    error = await collect_refusal(serve(replay, rec), chat(stream=False))
    assert (error.status, error.code, error.fails_over) == (400, None, False)
    assert error.message == rec.response["message"]


async def test_completion_stream_failing_before_any_token(replay) -> None:
    rec = recording("completion_stream_error")  # test_openai_server_stream_errors.py
    error = await refusal(serve(replay, rec), chat(messages=None, kind="completion", prompt="hi"))
    # HTTP 200, but the first event is the error: the backend's fault, before anything was sent.
    assert (error.status, error.code) == (502, "upstream_error")
    assert rec.source["asserted"]["error.message"] in error.message
    assert replay.bodies("/v1/completions")[-1]["stream"] is True


def test_empty_token_chunk_is_no_text_and_no_finish() -> None:
    rec = recording("chat_empty_token_chunk")  # test_postprocess_handlers.py
    a = TRTLLMDialect("trt-r", "m")
    chunk = rec.chunks[0]
    assert a.decode_chunk(chunk, chat=True) == []  # finish_reason a present null: not a finish
    without_null = {**chunk, "choices": [{k: v for k, v in chunk["choices"][0].items() if k != "finish_reason"}]}
    assert a.decode_chunk(without_null, chat=True) == []  # the exclude_none dump decodes the same
    text = {**chunk, "choices": [{**chunk["choices"][0], "delta": {"content": "Hi", "reasoning_content": ""}}]}
    assert a.decode_chunk(text, chat=True) == [TextDelta(0, "Hi")]
