"""The JSON shape validators: conforming bodies pass; each kind of deviation
the runtimes are known for is caught."""

from __future__ import annotations

import copy
from typing import Any

from conformance.schema import (
    chat_chunk_issues,
    chat_completion_issues,
    completion_issues,
    error_envelope_issues,
    model_list_issues,
)

CHAT: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
CHUNK: dict[str, Any] = {
    "id": "c",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
}


def paths(issues: list) -> list[str]:
    return [i.path for i in issues]


def mutated(base: dict[str, Any], fn) -> dict[str, Any]:
    body = copy.deepcopy(base)
    fn(body)
    return body


def test_conforming_bodies_have_no_issue() -> None:
    assert chat_completion_issues(CHAT) == []
    assert chat_chunk_issues(CHUNK) == []
    assert (
        model_list_issues({"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "x"}]})
        == []
    )
    assert error_envelope_issues({"error": {"message": "m", "type": "t", "param": None, "code": None}}) == []


def test_chat_completion_deviations() -> None:
    assert "id" in paths(chat_completion_issues(mutated(CHAT, lambda b: b.update(id=""))))  # TGI's empty id
    assert "choices[0].message.refusal" in paths(
        chat_completion_issues(mutated(CHAT, lambda b: b["choices"][0]["message"].pop("refusal")))
    )
    assert "choices[0].message.content" in paths(  # TGI tool messages omit content
        chat_completion_issues(mutated(CHAT, lambda b: b["choices"][0]["message"].pop("content")))
    )
    assert "choices[0].finish_reason" in paths(
        chat_completion_issues(mutated(CHAT, lambda b: b["choices"][0].update(finish_reason="abort")))
    )
    assert "choices[0].logprobs" in paths(
        chat_completion_issues(mutated(CHAT, lambda b: b["choices"][0].pop("logprobs")))
    )
    assert "created" in paths(chat_completion_issues(mutated(CHAT, lambda b: b.update(created="now"))))
    bad_call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"city": "Paris"}}}
    assert "choices[0].message.tool_calls[0].function.arguments" in paths(
        chat_completion_issues(mutated(CHAT, lambda b: b["choices"][0]["message"].update(tool_calls=[bad_call])))
    )


def test_chunk_deviations() -> None:
    assert "object" in paths(chat_chunk_issues(mutated(CHUNK, lambda b: b.update(object="chat.completion"))))
    assert "choices[0].finish_reason" in paths(
        chat_chunk_issues(mutated(CHUNK, lambda b: b["choices"][0].pop("finish_reason")))
    )
    assert "choices[0].delta.role" in paths(
        chat_chunk_issues(mutated(CHUNK, lambda b: b["choices"][0]["delta"].update(role=None)))
    )
    sglang_args_delta = {"index": 0, "id": None, "type": "function", "function": {"name": None, "arguments": "{"}}
    found = paths(
        chat_chunk_issues(mutated(CHUNK, lambda b: b["choices"][0]["delta"].update(tool_calls=[sglang_args_delta])))
    )
    assert "choices[0].delta.tool_calls[0].id" in found and "choices[0].delta.tool_calls[0].function.name" in found
    assert "choices[0].delta.tool_calls[0].index" in paths(
        chat_chunk_issues(
            mutated(CHUNK, lambda b: b["choices"][0]["delta"].update(tool_calls=[{"function": {"arguments": "{"}}]))
        )
    )


def test_completion_and_error_deviations() -> None:
    completion = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": "x", "logprobs": None, "finish_reason": "length"}],
    }
    assert completion_issues(completion, stream=False) == []
    assert "choices[0].finish_reason" in paths(
        completion_issues(  # TGI's eos_token
            mutated(completion, lambda b: b["choices"][0].update(finish_reason="eos_token")), stream=False
        )
    )
    assert "choices[0].finish_reason" in paths(
        completion_issues(  # null only while streaming
            mutated(completion, lambda b: b["choices"][0].update(finish_reason=None)), stream=False
        )
    )
    assert (
        completion_issues(mutated(completion, lambda b: b["choices"][0].update(finish_reason=None)), stream=True) == []
    )
    assert "error.code" in paths(
        error_envelope_issues({"error": {"message": "m", "type": "t", "param": None, "code": 400}})
    )
    assert "error" in paths(error_envelope_issues({"error": "Unauthorized"}))
    assert "error" in paths(error_envelope_issues({"object": "error", "message": "m"}))  # SGLang/TRT flat shape
