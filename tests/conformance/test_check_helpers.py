"""The failure builders the check modules share: each names the right place,
carries the offending value and the request, and passes what conforms."""

from __future__ import annotations

import dataclasses

import httpx
import openai
import pytest

from conformance.checks.common import (
    JsonShape,
    chunk_failure,
    field_failure,
    judge_cap,
    judge_json_text,
    judge_total,
    required_setting,
    sdk_stream_failure,
    usage_failure,
)
from conformance.checks.streaming import judge_roles_and_finishes
from conformance.checks.tools import judge_tool_stream
from conformance.context import Context
from conformance.http import Exchange
from conformance.result import CheckFailed, Skipped
from conformance.target import Target

CTX = Context(Target("http://127.0.0.1:9", "m"))  # nothing is sent
EX = Exchange("POST", "/chat/completions", {"model": "m"})
REQUEST = httpx.Request("POST", "http://127.0.0.1:9/chat/completions")


AN_OBJECT = JsonShape("a JSON object", lambda v: isinstance(v, dict), "content is JSON but not an object")


def judge_object(text: object) -> object:
    return judge_json_text(CTX, EX, text, "choices[0].message.content", "content is not JSON", AN_OBJECT)


def test_json_text_parses_fits_or_names_the_failure() -> None:
    assert judge_object('{"a": 1}') == {"a": 1}
    for text, message in (
        ("{", "content is not JSON"),
        (None, "content is not JSON"),
        ("[1]", "content is JSON but not an object"),
    ):
        with pytest.raises(CheckFailed) as err:
            judge_object(text)
        assert err.value.message == message
        e = err.value.evidence[0]
        assert (e.expected, e.seen, e.where) == ("a JSON object", repr(text), "choices[0].message.content")
        assert e.request == EX.request_summary()


def test_json_text_unparsed_evidence_overrides_expected_and_seen() -> None:
    with pytest.raises(CheckFailed) as err:
        judge_json_text(CTX, EX, "nope", "w", "x", AN_OBJECT, ("E2", "S2"))
    assert (err.value.evidence[0].expected, err.value.evidence[0].seen) == ("E2", "S2")


def test_total_must_be_the_sum() -> None:
    judge_total(CTX, EX, {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5})
    usage = {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 6}
    with pytest.raises(CheckFailed) as err:
        judge_total(CTX, EX, usage)
    e = err.value.evidence[0]
    assert err.value.message == "total is not the sum"
    assert (e.expected, e.seen, e.where, e.offending) == ("5", "6", "usage.total_tokens", usage)


def test_usage_and_chunk_failures_point_at_their_place() -> None:
    usage = {"prompt_tokens": 7}
    e = usage_failure(CTX, EX, usage, "prompt_tokens", "msg", "exp").evidence[0]
    assert (e.where, e.seen, e.offending, e.request) == ("usage.prompt_tokens", "7", None, EX.request_summary())
    e = usage_failure(CTX, EX, usage, "x.y", "msg", "exp", seen="'z'", show_usage=True).evidence[0]
    assert (e.where, e.seen, e.offending) == ("usage.x.y", "'z'", usage)
    chunk = {"choices": []}
    e = chunk_failure(CTX, EX, chunk, "chunk 4", "msg", "exp", "seen").evidence[0]
    assert (e.where, e.offending, e.expected, e.seen) == ("chunk 4", chunk, "exp", "seen")
    body = {"choices": []}
    e = field_failure(CTX, EX, "choices", "msg", "exp", "seen", offending=body).evidence[0]
    assert (e.where, e.offending, e.expected, e.seen, e.request) == (
        "choices",
        body,
        "exp",
        "seen",
        EX.request_summary(),
    )


def capped(tokens: int, finish: str) -> dict:
    usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}
    return {"choices": [{"index": 0, "finish_reason": finish}], "usage": usage}


def test_cap_wants_the_count_and_a_listed_finish() -> None:
    judge_cap(CTX, EX, capped(3, "length"), "cap", 3, "3 tokens", ("length",))
    judge_cap(CTX, EX, capped(1, "stop"), "cap", 1, "1 token", ("length", "stop"))
    for body in (capped(2, "length"), capped(3, "stop")):
        with pytest.raises(CheckFailed) as err:
            judge_cap(CTX, EX, body, "cap", 3, "3 tokens", ("length",))
        e = err.value.evidence[0]
        finish = body["choices"][0]["finish_reason"]
        want = f"{body['usage']['completion_tokens']} tokens, finish_reason {finish!r}"
        assert (err.value.message, e.where, e.expected, e.seen) == ("cap", "usage.completion_tokens", "3 tokens", want)


def test_a_missing_setting_skips_naming_its_flag() -> None:
    with_key = Context(dataclasses.replace(CTX.target, api_key="k"))
    assert required_setting(with_key, "api_key", "auth on") == "k"
    with pytest.raises(Skipped, match=r"^needs --rate-limited-key \(a limited key\)$"):
        required_setting(CTX, "rate_limited_key", "a limited key")


def test_a_stream_helper_failure_says_whether_a_chunk_was_rejected() -> None:
    rejected = openai.APIResponseValidationError(httpx.Response(200, request=REQUEST), None, message="bad chunk")
    failure = sdk_stream_failure(CTX, rejected, "valid X")
    assert (failure.message, failure.evidence[0].expected) == ("the official client rejects a chunk", "valid X")
    failure = sdk_stream_failure(CTX, IndexError("list index out of range"))
    assert failure.message == "the official client's stream helper broke"
    assert failure.evidence[0].seen == "IndexError: list index out of range"


def tool_chunk(delta: dict) -> dict:
    return {"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]}


def test_tool_stream_rebuilds_calls_and_locates_a_bad_delta() -> None:
    first = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    later = {"index": 0, "function": {"arguments": ": 1}"}}
    assert judge_tool_stream(CTX, EX, [tool_chunk(first), tool_chunk(later)]) == {
        0: {"id": "c1", "name": "f", "arguments": '{"a": 1}'}
    }
    for bad, message in (
        ({"index": 0, "id": "c1"}, "tool-call delta without a function object"),
        ({**later, "id": "c1"}, "id/type/name repeated in a later delta"),
        ({"index": 1, "function": {"arguments": "x"}}, "the first delta of a tool call must carry"),
        ({"index": 2, "id": "c2", "type": "function", "function": {"name": "g"}}, "tool indices not dense from 0"),
        ({"index": 0, "function": {"arguments": 7}}, "streamed arguments must be string fragments"),
    ):
        chunks = [tool_chunk(first), tool_chunk(bad)]
        with pytest.raises(CheckFailed) as err:
            judge_tool_stream(CTX, EX, chunks)
        assert err.value.message.startswith(message)
        e = err.value.evidence[0]
        assert (e.where, e.offending) == ("chunk 1 delta.tool_calls", chunks[1])


def delta(role: str | None = None, content: str = "", finish: str | None = None) -> dict:
    d: dict = {"content": content} if role is None else {"role": role, "content": content}
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def test_a_stream_role_is_judged_once_and_first() -> None:
    good = [delta("assistant"), delta(content="hi"), delta(finish="stop")]
    judge_roles_and_finishes(CTX, EX, good, 1)
    for chunks, where, message, seen in (
        (
            [delta("assistant"), delta("assistant", "hi"), delta(finish="stop")],
            "chunk 1 choice 0 delta.role",
            "role repeated (the official client concatenates it: 'assistantassistant')",
            "role in chunks [0, 1]",
        ),
        (
            [delta(content="hi"), delta("assistant"), delta(finish="stop")],
            "chunk 1 choice 0",
            "role arrives after content",
            "first in chunk 1",
        ),
    ):
        with pytest.raises(CheckFailed) as err:
            judge_roles_and_finishes(CTX, EX, chunks, 1)
        e = err.value.evidence[0]
        assert (err.value.message, e.where, e.seen) == (message, where, seen)
        assert e.offending == chunks[1]
