"""SGLangDialect against answers SGLang 0.5.23's own HTTP layer wrote
(tests/adapters/recordings/sglang/v0.5.23, made by scripts/record_sglang.py: SGLang's
FastAPI app, serving classes and tokenizer manager, with a stub in place of the GPU
scheduler). Each answer is served byte for byte by the replay server; each test names
the recording it replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.base import ErrorEvent, Finish, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.http_adapter import HTTPAdapter
from adapters.sglang import SGLangDialect
from tests.adapters.recorded import Recording, load, names, scripted
from tests.adapters.wire_samples import chat, collect, collect_refusal, delivered

RUN = "sglang/v0.5.23"
SERVED = "sgl-rec-model"
REPO = Path(__file__).resolve().parents[2]


def recording(name: str) -> Recording:
    return load(RUN, name)


def serve(replay, rec: Recording, **options) -> HTTPAdapter:
    return HTTPAdapter(SGLangDialect, "sgl-run", scripted(replay, rec), SERVED, options=options)


def asked(rec: Recording, **extra) -> object:
    body = rec.request["body"]
    stream = bool(body.get("stream"))
    if rec.request["path"] == "/v1/completions":
        return chat(stream=stream, messages=None, kind="completion", prompt=body["prompt"], **extra)
    return chat(stream=stream, messages=body["messages"], **extra)


def usage_of(rec: Recording) -> Usage:
    """The counts the recording reports (the answer's usage, or the stream's usage chunk)."""
    u = rec.response["usage"] if rec.events is None else next(c["usage"] for c in rec.chunks if c.get("usage"))
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Usage(u["prompt_tokens"], u["completion_tokens"], cached)


def texts(events: list, index: int = 0) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta) and e.index == index)


def test_every_recording_names_the_run_that_wrote_it() -> None:
    for name in names(RUN):
        rec = recording(name)
        src = rec.source
        assert src["runtime"] == "sglang" and src["version"] == "0.5.23", name
        assert (REPO / src["recorded_by"]).is_file(), name
        assert src["written_by"].startswith("sglang/srt/entrypoints/") and src["stub"], name
        assert (rec.events is None) != (rec.response is None), name
        # The parsed copy is the raw body's: the tests below may read either.
        if rec.events is None:
            assert json.loads(rec.raw) == rec.response, name
        else:
            frames = [f for f in rec.raw.split("\n\n") if f]
            assert [f.removeprefix("data: ") for f in frames] == [
                e if isinstance(e, str) else json.dumps(e, separators=(",", ":")) for e in rec.events
            ] or rec.name == "queue_full_stream", name


async def test_chat(replay) -> None:
    rec = recording("chat")  # OpenAIServingChat._build_chat_response
    a = serve(replay, rec)
    events = await collect(a, asked(rec))
    await a.aclose()
    # completion_tokens count the EOS, which has no text
    assert events == [TextDelta(0, "Rivers carry water to the sea."), Finish(0, "stop"), Usage(11, 8)]


@pytest.mark.parametrize("name", ["chat_stream", "chat_stream_usage"])
async def test_chat_stream_with_its_lone_finish_chunk(replay, name) -> None:
    rec = recording(name)  # _generate_chat_stream: the finish comes in a chunk of its own
    a = serve(replay, rec)
    events = await delivered(a, asked(rec, include_usage=name.endswith("usage")))
    await a.aclose()
    assert texts(events) == "Rivers carry water to the sea."
    tail = [Finish(0, "stop"), Usage(11, 8)] if name.endswith("usage") else [Finish(0, "stop")]
    assert [e for e in events if not isinstance(e, TextDelta)] == tail


@pytest.mark.parametrize(
    ("name", "text", "finish"),
    [
        ("chat_length", "Rivers carry water", "length"),
        ("chat_stop_string", "Rivers carry water to the sea", "stop"),  # matched_stop "."
        ("chat_stream_length", "Rivers carry water", "length"),
        ("unknown_model", "Rivers carry water", "length"),  # 0.5.23 echoes any model
    ],
)
async def test_finish_by_length_and_by_stop(replay, name, text, finish) -> None:
    rec = recording(name)
    a = serve(replay, rec)
    events = await delivered(a, asked(rec, sampling=SamplingParams(max_tokens=rec.request["body"]["max_tokens"])))
    await a.aclose()
    assert texts(events) == text
    assert [e for e in events if isinstance(e, Finish)] == [Finish(0, finish)]


@pytest.mark.parametrize("name", ["chat_logprobs", "chat_stream_logprobs"])
async def test_chat_logprobs(replay, name) -> None:
    rec = recording(name)
    a = serve(replay, rec)
    events = await delivered(a, asked(rec, sampling=SamplingParams(logprobs=True, top_logprobs=2)))
    await a.aclose()
    tokens = [lp for e in events if isinstance(e, TextDelta) and e.logprobs for lp in e.logprobs]
    assert [(t.token, t.logprob) for t in tokens] == [("Rivers", -0.25), (" carry", -0.5), (" water", -0.75)]
    assert [(t.token, t.logprob) for t in tokens[0].top] == [("Rivers", -0.25), ("<|im_end|>", -2.5)]
    assert tokens[1].bytes == list(b" carry")


@pytest.mark.parametrize("name", ["chat_n2", "chat_stream_n2"])
async def test_two_choices(replay, name) -> None:
    rec = recording(name)  # streamed, each choice's chunks carry that sample's own id
    a = serve(replay, rec)
    events = await delivered(a, asked(rec, sampling=SamplingParams(n=2), include_usage=True))
    await a.aclose()
    by_index = {texts(events, i): f for i in (0, 1) for f in events if isinstance(f, Finish) and f.index == i}
    assert by_index == {" A river runs": Finish(0, "stop"), "Rivers carry water": Finish(1, "length")}
    assert events[-1] == Usage(11, 7) == usage_of(rec)  # 3 + 3, and the EOS


@pytest.mark.parametrize("name", ["tool_call", "tool_call_stream", "tool_call_named_stream"])
async def test_tool_call(replay, name) -> None:
    rec = recording(name)  # the qwen parser; SGLang finishes a named tool_choice tool_calls, OpenAI stop
    body = rec.request["body"]
    a = serve(replay, rec)
    events = await delivered(a, asked(rec, tools=body["tools"], tool_choice=body.get("tool_choice")))
    await a.aclose()
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].name == "get_weather" and calls[0].id and calls[0].id.startswith("call_")
    assert all(c.id is None and c.name is None for c in calls[1:])  # the pieces' null id and name
    assert json.loads("".join(c.arguments for c in calls)) == {"city": "Lyon", "unit": "celsius"}
    assert texts(events) == ""  # content "" is not text
    word = "stop" if isinstance(body.get("tool_choice"), dict) else "tool_calls"  # OpenAI's words (the guard)
    assert [e for e in events if isinstance(e, Finish)] == [Finish(0, word)]


@pytest.mark.parametrize("name", ["completion", "completion_stream"])
async def test_completion(replay, name) -> None:
    rec = recording(name)  # a streamed completion finishes on its last text chunk
    a = serve(replay, rec)
    events = await delivered(a, asked(rec, include_usage=True))
    await a.aclose()
    assert texts(events) == "Rivers carry water to the sea."
    assert [e for e in events if not isinstance(e, TextDelta)] == [Finish(0, "stop"), usage_of(rec)]
    assert usage_of(rec).completion_tokens == 8


def test_completion_of_two_prompts_decodes_by_index() -> None:
    rec = recording("completion_prompts")  # the gateway sends one prompt a request
    a = SGLangDialect("sgl-run", SERVED)
    events = a.decode_response(rec.response, chat=False)
    assert [e for e in events if isinstance(e, Finish)] == [Finish(0, "length"), Finish(1, "length")]
    assert (texts(events, 0), texts(events, 1)) == (" A river runs", " The tide turns")
    usage = rec.response["usage"]  # both prompts' tokens, both choices'
    assert events[-1] == Usage(usage["prompt_tokens"], 6) and usage["completion_tokens"] == 6


@pytest.mark.parametrize("name", ["completion_n2", "completion_logprobs", "completion_stream_logprobs"])
async def test_completion_choices_and_logprobs(replay, name) -> None:
    rec = recording(name)
    n = rec.request["body"].get("n", 1)
    a = serve(replay, rec)
    events = await delivered(a, asked(rec, sampling=SamplingParams(n=n, logprobs="logprobs" in name, top_logprobs=2)))
    await a.aclose()
    assert len([e for e in events if isinstance(e, Finish)]) == n
    if "logprobs" in name:
        tokens = [lp for e in events if isinstance(e, TextDelta) and e.logprobs for lp in e.logprobs]
        assert [(t.token, t.logprob) for t in tokens] == [(" A", -0.25), (" river", -0.5), (" runs", -0.75)]
        assert [t.token for t in tokens[2].top] == [" runs", "<|im_end|>"]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("context_length", "is longer than the model's context length (1000 tokens)"),
        ("context_length_stream", "is longer than the model's context length"),  # a 400 before any chunk
        ("completion_context_length", "is longer than the model's context length"),
        ("context_sum", "exceeds the model's maximum context length of 1000 tokens"),
        ("max_completion_tokens", "max_completion_tokens is too large: 5000."),
    ],
)
async def test_context_refusals(replay, name, fragment) -> None:
    rec = recording(name)
    error = await collect_refusal(serve(replay, rec), asked(rec))
    assert (error.status, error.code) == (400, "context_length_exceeded"), error
    assert fragment in error.message


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("bad_request", "Field required"), ("tool_choice_without_tools", "Tools cannot be empty")],
)
async def test_other_400s_are_the_clients(replay, name, fragment) -> None:
    rec = recording(name)
    error = await collect_refusal(serve(replay, rec), asked(rec) if name != "bad_request" else chat(stream=False))
    assert (error.status, error.code, error.fails_over) == (400, None, False), error
    assert fragment in error.message


async def test_queue_full_is_retryable(replay) -> None:
    rec = recording("queue_full")  # 503 with type "503"
    error = await collect_refusal(serve(replay, rec), asked(rec))
    assert error.status == 503 and error.fails_over, error


async def test_queue_full_in_a_stream(replay) -> None:
    rec = recording("queue_full_stream")  # a 200, then an error event (json.dumps spacing) and [DONE]
    a = serve(replay, rec)
    events = await collect(a, asked(rec))
    await a.aclose()
    assert len(events) == 1 and isinstance(events[0], ErrorEvent), events
    error = events[0].error
    assert error.status == 503 and error.fails_over and "queue is full" in error.message, error


async def test_cached_tokens_with_cache_report(replay) -> None:
    rec = recording("chat_cache_report")
    a = serve(replay, rec, cache_report=True)
    events = await collect(a, asked(rec))
    await a.aclose()
    assert events[-1] == Usage(11, 3, 8)
