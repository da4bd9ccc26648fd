"""The TRT-LLM double against TensorRT-LLM's own test assertions
(tests/adapters/recordings/trtllm, the same files the adapter replays): each recorded
situation is provoked in the double and its answer compared with the recording: the
status, the error body's keys and values, the frames of a failed stream, the keys
and value types of a content chunk."""

from __future__ import annotations

import json

import pytest

from tests.adapters.recorded import load
from tests.simulators.conftest import chat, client, sse_frames
from tests.simulators.test_tgi_recordings import same_shape

MAX_SEQ_LEN = 2048  # test_context_length_error.py's context_length_exceeded_message(2048, 4096)


@pytest.fixture(scope="module")
def sim(make_sim):
    return make_sim("trtllm", max_model_len=MAX_SEQ_LEN)


@pytest.mark.parametrize(("name", "marker"), [("context_length", "prompt_tokens=4096"), ("bad_request", "status=400")])
def test_flat_errors_match_the_recording(sim, name, marker) -> None:
    rec = load("trtllm", name)
    r = client(sim).post("/v1/chat/completions", json=chat(f"hi [[sim:{marker}]]"))
    assert r.status_code == rec.status == rec.source["asserted"]["status"], rec.cite
    seen = r.json()
    assert set(seen) == set(rec.response), rec.cite  # ErrorResponse: object, message, type, param, code
    same_shape(rec.response, seen, True, rec.cite)
    assert (seen["type"], seen["code"]) == (rec.source["asserted"]["type"], rec.source["asserted"]["code"])


def test_context_message_in_openais_words(sim) -> None:
    rec = load("trtllm", "context_length")
    for stream in (False, True):  # a stream is refused before it starts
        r = client(sim).post("/v1/chat/completions", json=chat("hi [[sim:prompt_tokens=4096]]", stream=stream))
        assert r.status_code == 400 and r.json()["message"] == rec.source["asserted"]["message"]
    fits = client(sim).post("/v1/chat/completions", json=chat("hi [[sim:prompt_tokens=2000]]", max_tokens=2))
    assert fits.status_code == 200


def test_completion_stream_failing_before_any_token(sim) -> None:
    rec = load("trtllm", "completion_stream_error")
    body = {"model": "test-model", "prompt": "hi [[sim:error_after=0]]", "max_tokens": 4, "stream": True}
    r = client(sim).post(rec.request["path"], json=body)
    assert r.status_code == rec.status
    frames = sse_frames(r.text)
    assert len(frames) == rec.source["asserted"]["frames"] and frames[-1] == rec.events[-1] == "[DONE]"
    error = json.loads(frames[0])
    same_shape(rec.events[0], error, True, rec.cite)  # {"error": {message, type, param, code}}
    assert error["error"]["type"] == rec.source["asserted"]["error.type"]


def test_content_chunk_keys(sim) -> None:
    rec = load("trtllm", "chat_empty_token_chunk")
    r = client(sim).post("/v1/chat/completions", json=chat("hi", stream=True, max_tokens=4))
    chunks = [json.loads(f) for f in sse_frames(r.text) if f != "[DONE]"]
    content = [c for c in chunks if c["choices"] and "content" in c["choices"][0]["delta"]]
    assert content, chunks
    for chunk in content:  # the recording's non-null keys and types; a present null is §7's open question
        same_shape(rec.chunks[0], chunk, False, rec.cite)
        assert chunk["id"].startswith("chatcmpl-") and chunk["model"] == "sim-model"
