"""`ChatAnswer` (gateway/openai/answer_format.py) on its own: the answer's id from the
gateway's request id (its prefix by API, no dashes, 32 characters at most), and the
stream and the whole answer built with every field the request asked for (choices,
logprobs, usage chunk, the pool's fingerprint, the model, the creation time)."""

from __future__ import annotations

import json

import pytest

from adapters.base import Finish, GenerationRequest, SamplingParams, TextDelta, TokenLogprob, Usage
from gateway.openai.answer_format import ChatAnswer

RID = "0123456789abcdef-0123456789abcdef-ffff"  # 36 characters, two dashes


def first(**fields) -> GenerationRequest:
    return GenerationRequest(request_id=RID, model="m", **fields)


@pytest.mark.parametrize(("chat", "prefix"), [(True, "chatcmpl-"), (False, "cmpl-")])
def test_the_id_is_the_gateway_s_request_id_without_dashes_under_the_api_s_prefix(chat, prefix):
    answer = ChatAnswer(first(), 1700, 1, chat)
    assert answer.response_id == prefix + "0123456789abcdef0123456789abcdef"


def chunks(raw: bytes) -> list[dict]:
    lines = [ln.removeprefix(b"data: ") for ln in raw.split(b"\n\n") if ln.startswith(b"data: ")]
    return [json.loads(ln) for ln in lines if ln != b"[DONE]"]


LP = [TokenLogprob("a", -0.25)]
EVENTS = [TextDelta(0, "a", LP), TextDelta(1, "b", LP), Finish(0, "stop"), Finish(1, "length"), Usage(3, 2)]


@pytest.mark.parametrize(("chat", "kind"), [(True, "chat.completion.chunk"), (False, "text_completion")])
async def test_a_stream_carries_every_choice_logprobs_the_usage_and_the_fingerprint(chat, kind):
    sampling = SamplingParams(logprobs=True, top_logprobs=0, n=2)
    answer = ChatAnswer(first(sampling=sampling, include_usage=True), 1700, 2, chat, "fp_pool")
    raw = answer.stream_start() + b"".join(answer.stream_feed(e) for e in EVENTS) + await answer.stream_end(None)
    out = chunks(raw)
    assert {c["id"] for c in out} == {answer.response_id} and {c["created"] for c in out} == {1700}
    assert {c["model"] for c in out} == {"m"} and {c["system_fingerprint"] for c in out} == {"fp_pool"}
    assert {c["object"] for c in out} == {kind}
    choices = [ch for c in out for ch in c["choices"]]
    assert {ch["index"] for ch in choices} == {0, 1}
    logprobs = [ch["logprobs"] for ch in choices if ch.get("logprobs")]
    assert len(logprobs) == 2 and "-0.25" in json.dumps(logprobs)
    assert out[-1]["usage"]["total_tokens"] == 5 and out[-1]["choices"] == []


@pytest.mark.parametrize(("chat", "kind"), [(True, "chat.completion"), (False, "text_completion")])
async def test_a_whole_answer_carries_every_choice_logprobs_and_the_fingerprint(chat, kind):
    sampling = SamplingParams(logprobs=True, top_logprobs=0, n=2)
    answer = ChatAnswer(first(sampling=sampling), 1700, 2, chat, "fp_pool")
    for event in EVENTS:
        answer.whole_feed(event)
    body = await answer.whole_body(Usage(3, 2))
    assert (body["id"], body["created"], body["model"], body["object"]) == (
        answer.response_id,
        1700,
        "m",
        kind,
    )
    assert body["system_fingerprint"] == "fp_pool" and body["usage"]["total_tokens"] == 5
    texts = [c["message"]["content"] if chat else c["text"] for c in body["choices"]]
    assert texts == ["a", "b"]
    assert [c["finish_reason"] for c in body["choices"]] == ["stop", "length"]
    assert all(c["logprobs"] is not None for c in body["choices"])
