"""LlamaCppDialect against answers a real `llama-server` wrote (tests/adapters/recordings/
llamacpp, made by scripts/record_llamacpp_cases.py on make-tiny's weights as an F32 GGUF).
Each answer is served byte for byte by the replay server; the expectations are read
from the recording itself, so a re-recording keeps them true."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.base import Finish, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.http_adapter import HTTPAdapter
from adapters.llamacpp import LlamaCppDialect
from adapters.llamacpp_load import parse_props, parse_slots
from adapters.oneshot import DetokenizeRequest, EmbeddingRequest, TokenizeRequest
from tests.adapters.recorded import Recording, load, names
from tests.adapters.wire_samples import chat, delivered_closed, refusal

RUN = "llamacpp"
REPO = Path(__file__).resolve().parents[2]


def recording(name: str) -> Recording:
    return load(RUN, name)


def serve(replay, *recs: Recording, **options: Any) -> HTTPAdapter:
    """The adapter on the replay server answering each recording's request as recorded."""
    routes = {f"{r.request['method']} {r.request['path']}": [_replayed(r)] for r in recs}
    replay.script(routes)
    return HTTPAdapter(LlamaCppDialect, "lc-rec", str(replay.url), "tiny", options=options)


def _replayed(rec: Recording) -> dict[str, Any]:
    if rec.events is not None:
        return {"status": rec.status, "frames": [f + "\n\n" for f in rec.raw.split("\n\n") if f]}
    return {"status": rec.status, "body": rec.raw}


def asked(rec: Recording, **sampling: Any) -> Any:
    body = rec.request["body"]
    fields = {k: body[k] for k in ("max_tokens", "temperature", "stop") if k in body}
    if "top_logprobs" in body or "logprobs" in body:
        fields["logprobs"] = True
        fields["top_logprobs"] = int(
            body.get("top_logprobs", 0) if isinstance(body.get("logprobs"), bool) else body["logprobs"]
        )
    params = SamplingParams(**{**fields, **sampling})
    stream = bool(body.get("stream"))
    if rec.request["path"] == "/v1/completions":
        return chat(stream=stream, messages=None, kind="completion", prompt=body["prompt"], sampling=params)
    extra = {k: body[k] for k in ("tools", "tool_choice", "response_format") if k in body}
    return chat(stream=stream, messages=body["messages"], sampling=params, **extra)


def recorded_text(rec: Recording) -> str:
    if rec.events is None:
        choice = rec.response["choices"][0]
        return choice["message"]["content"] if "message" in choice else choice["text"]
    return "".join(
        (c["choices"][0].get("delta", {}).get("content") or c["choices"][0].get("text") or "")
        for c in rec.chunks
        if c.get("choices")
    )


def recorded_usage(rec: Recording) -> dict:
    if rec.events is None:
        return rec.response["usage"]
    return next(c["usage"] for c in reversed(rec.chunks) if c.get("usage"))


def text_of(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_every_recording_names_the_run_that_wrote_it() -> None:
    assert len(names(RUN)) >= 20
    for name in names(RUN):
        rec = recording(name)
        assert rec.source["runtime"] == "llamacpp" and (REPO / rec.source["recorded_by"]).is_file(), name
        if rec.events is not None:  # the parsed copy is the raw body's
            frames = [f.removeprefix("data: ") for f in rec.raw.split("\n\n") if f.startswith("data: ")]
            assert [f if f == "[DONE]" else json.loads(f) for f in frames] == rec.events, name


@pytest.mark.parametrize("name", ["chat", "chat_stream", "chat_stop", "completion", "completion_stream"])
async def test_text_finish_and_usage(replay, name) -> None:
    rec = recording(name)
    events = await delivered_closed(serve(replay, rec), asked(rec))
    assert text_of(events) == recorded_text(rec)
    finishes = [e for e in events if isinstance(e, Finish)]
    assert len(finishes) == 1 and finishes[0].reason in ("stop", "length")
    u = recorded_usage(rec)
    usage = [e for e in events if isinstance(e, Usage)]
    assert usage[-1].prompt_tokens == u["prompt_tokens"] and usage[-1].completion_tokens == u["completion_tokens"]


async def test_logprobs_true_alone_gives_no_alternatives_where_llamacpp_sent_20(replay) -> None:
    rec = recording("chat_logprobs_true")
    assert len(rec.response["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 20
    events = await delivered_closed(serve(replay, rec), asked(rec))
    tokens = [lp for e in events if isinstance(e, TextDelta) and e.logprobs for lp in e.logprobs]
    assert tokens and all(t.top == [] for t in tokens)


async def test_streamed_logprobs_keep_two_alternatives(replay) -> None:
    rec = recording("chat_logprobs_stream")
    events = await delivered_closed(serve(replay, rec), asked(rec))
    tokens = [lp for e in events if isinstance(e, TextDelta) and e.logprobs for lp in e.logprobs]
    assert tokens and all(len(t.top) == 2 for t in tokens)
    assert "".join(t.token for t in tokens) == recorded_text(rec)


async def test_completion_logprobs_from_the_chat_shape(replay) -> None:
    rec = recording("completion_logprobs")
    events = await delivered_closed(serve(replay, rec), asked(rec))
    tokens = [lp for e in events if isinstance(e, TextDelta) and e.logprobs for lp in e.logprobs]
    content = rec.response["choices"][0]["logprobs"]["content"]
    assert [(t.token, t.logprob) for t in tokens] == [(c["token"], c["logprob"]) for c in content]
    assert all(len(t.top) == 2 for t in tokens)


@pytest.mark.parametrize("name", ["tool_required", "tool_required_stream"])
async def test_a_tool_request_is_decoded_as_llamacpp_answered(replay, name) -> None:
    # Recorded: with make-tiny's template this llama.cpp did not constrain
    # tool_choice "required" to a call (docs/runtimes.md §8.3); the answer is text.
    rec = recording(name)
    events = await delivered_closed(serve(replay, rec), asked(rec))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    recorded_calls = [
        c for c in (rec.events or [rec.response]) if isinstance(c, dict) and "tool_calls" in json.dumps(c)
    ]
    assert bool(calls) == bool(recorded_calls)
    assert text_of(events) == recorded_text(rec)
    assert len([e for e in events if isinstance(e, Finish)]) == 1


async def test_json_schema_output(replay) -> None:
    rec = recording("json_schema")
    events = await delivered_closed(serve(replay, rec), asked(rec))
    assert json.loads(text_of(events))["answer"] in ("yes", "no")


@pytest.mark.parametrize("name", ["context_overflow", "context_overflow_stream"])
async def test_context_overflow(replay, name) -> None:
    rec = recording(name)
    assert rec.status == 400 and rec.response["error"]["type"] == "exceed_context_size_error"
    err = await refusal(serve(replay, rec), asked(rec))
    assert (err.status, err.code) == (400, "context_length_exceeded")


@pytest.mark.parametrize(("name", "status"), [("n_above_slots", 400), ("bad_response_format", 400)])
async def test_client_mistakes_keep_llamacpps_words(replay, name, status) -> None:
    rec = recording(name)
    err = await refusal(serve(replay, rec), asked(rec))
    assert err.status == status and err.message == rec.response["error"]["message"]


async def test_its_500_for_a_malformed_body_would_be_the_backends_fault(replay) -> None:
    # The gateway never forwards a malformed body (test_llamacpp_real.py); were one
    # forwarded, llama.cpp's 500 is no client mistake the gateway could name.
    rec = recording("malformed_json")
    assert rec.status == 500 and rec.response["error"]["type"] == "server_error"
    err = await refusal(serve(replay, rec), chat(stream=False))
    assert err.status == 502


async def test_tokenize_and_detokenize(replay) -> None:
    tok, detok = recording("tokenize"), recording("detokenize")
    a = serve(replay, tok, detok)
    result = await a.tokenize(TokenizeRequest("r", "m", prompt=tok.request["body"]["content"]))
    back = await a.detokenize(DetokenizeRequest("r", "m", tokens=detok.request["body"]["tokens"]))
    await a.aclose()
    assert result.tokens == tok.response["tokens"] and back.prompt == detok.response["content"]
    sent = replay.bodies("/tokenize")[-1]
    assert sent["add_special"] is True and sent["parse_special"] is True


async def test_embeddings(replay) -> None:
    rec = recording("embeddings")
    a = serve(replay, rec, embeddings=True)
    result = await a.embed(EmbeddingRequest("r", "m", inputs=rec.request["body"]["input"]))
    await a.aclose()
    assert len(result.vectors) == 2 and result.vectors[0] == rec.response["data"][0]["embedding"]


async def test_health_conditions_and_load_views(replay) -> None:
    props, slots, metrics, health = (recording(n) for n in ("props", "slots", "metrics", "health"))
    conditions = parse_props(props.response)
    assert conditions is not None and conditions.slots == 2 and conditions.n_ctx == 1024 and conditions.tools
    assert parse_slots(slots.response) == (0, 0.0)
    a = serve(replay, props, slots, metrics, health)
    assert (await a.health()).ok
    load = await a.load()
    await a.aclose()
    assert (load.running, load.waiting) == (0, 0) and load.kv_usage == 0.0
    assert load.prefix_hit_rate is not None and 0 <= load.prefix_hit_rate <= 1
    assert a.dialect.props == conditions


@pytest.mark.parametrize("name", ["tool_forced", "tool_forced_stream"])
async def test_a_forced_call_as_the_dialect_sends_it_is_one_call(replay, name) -> None:
    # The recording's request is what the dialect sends for tool_choice "required" once
    # /props showed a <tool_call> template; llama.cpp's answer is one complete call.
    rec = recording(name)
    a = serve(replay, rec, recording("props"), recording("health"))
    assert (await a.health()).ok  # the first ready probe reads /props
    body = rec.request["body"]
    request = chat(
        stream=bool(body.get("stream")),
        messages=body["messages"][:-1],
        tools=body["tools"],
        tool_choice="required",
        sampling=SamplingParams(max_tokens=body["max_tokens"], temperature=0),
    )
    events = await delivered_closed(a, request)
    sent = replay.bodies("/v1/chat/completions")[-1]
    fields = ("messages", "tools", "tool_choice", "parallel_tool_calls", "stop", "max_tokens", "temperature")
    assert {k: sent[k] for k in fields} == {k: body[k] for k in fields}
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert {c.tool_index for c in calls} == {0} and next(c.name for c in calls if c.name) == "get_weather"
    assert json.loads("".join(c.arguments for c in calls))["city"] in ("Lyon", "Paris")
    assert [e.reason for e in events if isinstance(e, Finish)] == ["tool_calls"] and not text_of(events)
