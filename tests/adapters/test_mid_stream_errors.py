"""A failure after the first event, as each runtime writes it, reaches the client the
same way: 502, `server_error`, `upstream_error` (the request was accepted and
generation had begun, so it is never the client's fault).

Each sample is what the runtime puts on the wire when its engine fails mid-stream
(docs/runtimes.md §1-§4), replayed byte for byte; what the encoder gets is read
through the stream guard, as the gateway does. The same fault from each simulator
through a gateway process is checked in test_runtimes_e2e.py."""

from __future__ import annotations

import pytest

from adapters.base import ErrorEvent, TextDelta
from adapters.http_adapter import HTTPAdapter
from adapters.llamacpp import LlamaCppDialect
from adapters.openai import OpenAIDialect
from adapters.sglang import SGLangDialect
from adapters.tgi import TGIDialect
from adapters.trtllm import TRTLLMDialect
from adapters.vllm import VLLMDialect
from tests.adapters.wire_samples import (
    chat,
    delivered,
    sse,
)


def text_chunk(text: str) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
    }


FIRST = sse(text_chunk("Hi"))

# runtime -> (adapter class, the frames of a stream whose engine fails after "Hi", cut after them)
FAILURES = {
    # nested error with the integer code (serving.py `create_streaming_error_response`), then [DONE]
    "vllm": (
        VLLMDialect,
        [FIRST, sse({"error": {"message": "engine failed", "type": "InternalServerError", "param": None, "code": 500}})]
        + [sse("[DONE]")],
        False,
    ),
    # flat error: SGLang's stream catch-all calls every failure a 400 BadRequestError
    "sglang": (
        SGLangDialect,
        [FIRST]
        + [
            sse(
                {
                    "error": {
                        "object": "error",
                        "message": "Simulated engine failure",
                        "type": "BadRequestError",
                        "param": None,
                        "code": 400,
                    }
                }
            ),
            sse("[DONE]"),
        ],
        False,
    ),
    # a failed chat stream is cut: no error event, no [DONE] (chat_stream_generator re-raises)
    "trtllm": (TRTLLMDialect, [FIRST], True),
    # 422 hard-coded for every in-stream error (infer/mod.rs `into_openai_event`)
    "tgi": (
        TGIDialect,
        [
            FIRST,
            sse(
                {"error": {"message": "Request failed during generation: Server error: boom", "http_status_code": 422}}
            ),
        ]
        + [sse("[DONE]")],
        False,
    ),
    # the same kind in another's words: TGI's overload, which only an early event may claim
    "tgi-overloaded": (
        TGIDialect,
        [FIRST, sse({"error": {"message": "Model is overloaded", "http_status_code": 422}}), sse("[DONE]")],
        False,
    ),
    # a decode failure after the first token: an error event, and the stream ends without
    # [DONE] (server-context.cpp `send_error`; docs/runtimes.md §8.4)
    "llamacpp": (
        LlamaCppDialect,
        [FIRST, sse({"error": {"code": 500, "message": "Compute error.", "type": "server_error"}})],
        False,
    ),
    "openai": (
        OpenAIDialect,
        [FIRST, sse({"error": {"message": "boom", "type": "invalid_request_error", "param": None, "code": None}})]
        + [sse("[DONE]")],
        False,
    ),
}


@pytest.mark.parametrize("runtime", list(FAILURES))
async def test_a_failure_after_the_first_event_is_the_backends_for_every_runtime(replay, runtime):
    cls, frames, cut = FAILURES[runtime]
    replay.reply({"status": 200, "frames": frames, "cut": cut})
    url = replay.url + "/v1" if cls is OpenAIDialect else replay.url
    adapter = HTTPAdapter(cls, "be-1", url, "m")
    events = await delivered(adapter, chat())
    await adapter.aclose()
    assert events[0] == TextDelta(0, "Hi") and len(events) == 2
    error = events[-1].error if isinstance(events[-1], ErrorEvent) else None
    assert error is not None, events
    assert (error.status, error.type, error.code) == (502, "server_error", "upstream_error"), error
    # A tenant reads it: the backend is never named, only that it failed.
    assert "be-1" not in error.message and "backend serving this model" in error.message
