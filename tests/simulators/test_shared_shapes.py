"""What the four runtime doubles share, checked on each of them: usage that adds up,
chat and completions logprobs, the stream tail ([DONE], the `no_done` and `cut_after`
faults), `n`, stop strings, and the official client reading every wire. Where a
runtime differs on one of these, `Quirks` says how (docs/runtimes.md §6)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import openai
import pytest

from simulators.testing import SimulatorHandle
from tests.simulators.conftest import chat, client, sse_frames, sse_json


@dataclass(frozen=True)
class Quirks:
    logprob_bytes: bool  # chat logprob entries carry `bytes`
    completion_logprobs: bool  # legacy completions answer an integer `logprobs`
    honours_n: bool  # `n` choices (TGI documents `n` as unused)
    stop_finish: str  # the finish_reason of a matched stop string
    keeps_stop: bool  # the text ends with the matched stop string


QUIRKS = {
    "vllm": Quirks(logprob_bytes=True, completion_logprobs=True, honours_n=True, stop_finish="stop", keeps_stop=False),
    "sglang": Quirks(
        logprob_bytes=True, completion_logprobs=True, honours_n=True, stop_finish="stop", keeps_stop=False
    ),
    "trtllm": Quirks(
        logprob_bytes=True, completion_logprobs=True, honours_n=True, stop_finish="stop", keeps_stop=False
    ),
    "tgi": Quirks(
        logprob_bytes=False, completion_logprobs=False, honours_n=False, stop_finish="stop_sequence", keeps_stop=True
    ),
}
WITH_COMPLETION_LOGPROBS = [kind for kind, quirks in QUIRKS.items() if quirks.completion_logprobs]


@pytest.fixture(scope="module")
def simulator(make_sim) -> Callable[[str], SimulatorHandle]:
    """One simulator per runtime for the module, started when a test first needs it."""
    started: dict[str, SimulatorHandle] = {}

    def get(kind: str) -> SimulatorHandle:
        if kind not in started:
            started[kind] = make_sim(kind)
        return started[kind]

    return get


@pytest.mark.parametrize("kind", list(QUIRKS))
def test_usage_adds_up_and_max_tokens_ends_by_length(simulator, kind: str) -> None:
    body = client(simulator(kind)).post("/v1/chat/completions", json=chat(max_tokens=3)).json()
    usage = body["usage"]
    assert usage["prompt_tokens"] == 4  # <user> hello there <assistant>
    assert usage["completion_tokens"] == 3 and usage["total_tokens"] == 7
    assert body["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("kind", list(QUIRKS))
def test_include_usage_ends_the_stream_with_a_usage_chunk_then_done(simulator, kind: str) -> None:
    raw = (
        client(simulator(kind))
        .post("/v1/chat/completions", json=chat(stream=True, max_tokens=3, stream_options={"include_usage": True}))
        .text
    )
    assert sse_frames(raw)[-1] == "[DONE]"
    last = sse_json(raw)[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("kind", list(QUIRKS))
def test_no_done_fault_ends_the_stream_normally_without_done(simulator, kind: str) -> None:
    frames = sse_frames(
        client(simulator(kind)).post("/v1/chat/completions", json=chat("x [[sim:no_done]]", stream=True)).text
    )
    assert frames[-1] != "[DONE]" and json.loads(frames[-1])["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("kind", list(QUIRKS))
def test_cut_after_truncates_the_stream(simulator, kind: str) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        client(simulator(kind)).post("/v1/chat/completions", json=chat("x [[sim:cut_after=2]]", stream=True))


@pytest.mark.parametrize("kind", list(QUIRKS))
def test_n_choices(simulator, kind: str) -> None:
    c = client(simulator(kind))
    expected = 2 if QUIRKS[kind].honours_n else 1
    body = c.post("/v1/chat/completions", json=chat(n=2, max_tokens=3)).json()
    assert [choice["index"] for choice in body["choices"]] == list(range(expected))
    chunks = sse_json(c.post("/v1/chat/completions", json=chat(n=2, max_tokens=3, stream=True)).text)
    finished = [ch["choices"][0]["index"] for ch in chunks if ch["choices"] and ch["choices"][0].get("finish_reason")]
    assert sorted(finished) == list(range(expected))


@pytest.mark.parametrize("kind", list(QUIRKS))
def test_stop_string_ends_the_text(simulator, kind: str) -> None:
    c = client(simulator(kind))
    text = c.post("/v1/chat/completions", json=chat(max_tokens=6)).json()["choices"][0]["message"]["content"]
    stop = " " + text.split()[3]
    choice = c.post("/v1/chat/completions", json=chat(max_tokens=6, stop=[stop])).json()["choices"][0]
    quirks = QUIRKS[kind]
    assert choice["finish_reason"] == quirks.stop_finish
    assert choice["message"]["content"].endswith(stop) is quirks.keeps_stop
    assert text.startswith(choice["message"]["content"].removesuffix(stop))


@pytest.mark.parametrize("kind", list(QUIRKS))
def test_chat_logprobs_in_the_runtime_shape(simulator, kind: str) -> None:
    c = client(simulator(kind))
    body = c.post("/v1/chat/completions", json=chat(max_tokens=3, logprobs=True, top_logprobs=2)).json()
    entries = body["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == body["choices"][0]["message"]["content"]
    assert all(len(e["top_logprobs"]) == 2 and e["logprob"] < 0 for e in entries)
    assert all(("bytes" in e) is QUIRKS[kind].logprob_bytes for e in entries)
    chunks = sse_json(c.post("/v1/chat/completions", json=chat(max_tokens=3, logprobs=True, stream=True)).text)
    streamed = [
        e
        for ch in chunks
        if ch.get("choices") and ch["choices"][0].get("logprobs")
        for e in ch["choices"][0]["logprobs"]["content"]
    ]
    assert len(streamed) == 3
    plain = c.post("/v1/chat/completions", json=chat(max_tokens=2)).json()
    assert plain["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("kind", WITH_COMPLETION_LOGPROBS)
def test_completion_logprobs_use_the_legacy_shape(simulator, kind: str) -> None:
    c = client(simulator(kind))
    body = c.post(
        "/v1/completions", json={"model": "sim-model", "prompt": "a b", "max_tokens": 3, "logprobs": 2}
    ).json()
    lp = body["choices"][0]["logprobs"]
    assert "".join(lp["tokens"]) == body["choices"][0]["text"]
    assert len(lp["token_logprobs"]) == len(lp["text_offset"]) == 3 and all(len(t) == 2 for t in lp["top_logprobs"])
    chunks = sse_json(
        c.post(
            "/v1/completions",
            json={"model": "sim-model", "prompt": "a b", "max_tokens": 3, "logprobs": 1, "stream": True},
        ).text
    )
    assert (
        sum(
            len(ch["choices"][0]["logprobs"]["tokens"])
            for ch in chunks
            if ch.get("choices") and ch["choices"][0].get("logprobs")
        )
        == 3
    )


@pytest.mark.parametrize("kind", list(QUIRKS))
def test_official_openai_client_reads_it(simulator, kind: str) -> None:
    api = openai.OpenAI(base_url=simulator(kind).url + "/v1", api_key="x")
    out = api.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 4
    pieces = [
        ch.choices[0].delta.content or ""
        for ch in api.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
        if ch.choices
    ]
    assert len("".join(pieces).split()) == 4


@pytest.mark.parametrize("kind", ["vllm", "sglang", "trtllm"])
def test_legacy_echo_puts_each_prompt_before_its_choices(simulator, kind: str) -> None:
    # vLLM, SGLang and TRT-LLM answer `echo: true` with the prompt before the completion
    # (TGI has no `echo`; its adapter refuses it); choices are prompt-major, n per prompt
    sim = client(simulator(kind))
    body = {"model": "sim-model", "prompt": ["xylophone quartz", "yodel"], "max_tokens": 2, "n": 2, "echo": True}
    texts = [
        c["text"] for c in sorted(sim.post("/v1/completions", json=body).json()["choices"], key=lambda c: c["index"])
    ]
    assert [t[: len(p)] for t, p in zip(texts, ["xylophone quartz"] * 2 + ["yodel"] * 2)] == [
        "xylophone quartz"
    ] * 2 + ["yodel"] * 2
    assert all(len(t) > len("yodel") for t in texts)
    plain = sim.post("/v1/completions", json={**body, "echo": False}).json()["choices"]
    assert not any(c["text"].startswith(("xylophone quartz", "yodel")) for c in plain)
