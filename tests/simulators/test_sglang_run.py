"""The SGLang double against the answers SGLang 0.5.23's own HTTP layer wrote
(tests/adapters/recordings/sglang/v0.5.23, the files the adapter replays; see
scripts/record_sglang.py). Each recorded request goes to a double set up as the
recording's server was, told by a marker what the stub model did (stop after N
tokens, call the tool, be full), and the answer is compared with the recording:
status; every key, null and value type (the recordings keep the wire's keys);
which chunk of a stream carries what, per choice; ids, `object`, `model`,
finish reasons, `matched_stop`'s type; and the error bodies' type, code and
message with the numbers left out."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tests.adapters.recorded import Recording, load, names
from tests.simulators.conftest import client, sse_frames
from tests.simulators.test_tgi_recordings import same_shape

RUN = "sglang/v0.5.23"
SERVED = "sgl-rec-model"
HEX32 = re.compile(r"^[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def sims(make_sim):
    options = {"model_name": SERVED, "max_model_len": 1000, "tool_call_parser": "qwen", "health_latency": 0.2}
    return {False: make_sim("sglang", **options), True: make_sim("sglang", enable_cache_report=True, **options)}


def marker(rec: Recording) -> str:
    """What the stub model did, as the double's markers say it."""
    answers = rec.source["model_answers"]
    if rec.name.startswith("queue_full"):
        return "[[sim:overloaded]]"
    if rec.name.startswith("context_length") or rec.name == "completion_context_length":
        return ""
    if answers and answers[0]["text"].startswith("<tool_call>"):
        return "[[sim:tool_call]]"
    if answers and answers[0]["finish"] == "eos":
        return f"[[sim:output_tokens={len(answers[0]['text'].split())}]]"
    return ""


def request_body(rec: Recording) -> dict[str, Any]:
    body = json.loads(json.dumps(rec.request["body"]))
    mark = marker(rec)
    if not mark:
        return body
    if "messages" in body:
        body["messages"][-1]["content"] += " " + mark
    elif isinstance(body.get("prompt"), list):
        body["prompt"] = [p + " " + mark for p in body["prompt"]]
    elif "prompt" in body:
        body["prompt"] += " " + mark
    return body


def without_numbers(text: str) -> str:
    return re.sub(r"\d+", "N", text)


def token_keyed(answer: dict[str, Any]) -> dict[str, Any]:
    """A completion's `top_logprobs` are objects keyed by token text, which is the
    model's: their values are compared, not their keys."""
    out = json.loads(json.dumps(answer))
    for choice in out.get("choices", []):
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("top_logprobs"), list):
            logprobs["top_logprobs"] = [list(t.values()) for t in logprobs["top_logprobs"]]
    return out


def kind_of(chunk: dict[str, Any]) -> str:
    """A chunk's part in the stream: what the double must place alike."""
    if "error" in chunk:
        return "error"
    if not chunk["choices"]:
        return "usage"
    choice = chunk["choices"][0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        calls = delta.get("tool_calls")
        if calls:
            kind = "named call" if calls[0]["function"]["name"] else "call"
        elif "role" in delta and delta["role"] == "assistant":
            kind = "role"
        else:
            kind = "text" if delta.get("content") else "empty"
    else:
        kind = "text" if choice.get("text") else "empty"
    finish = choice.get("finish_reason")
    return kind + (f" + finish {finish}" if finish else "")


def layout(chunks: list[dict[str, Any]], reasons: bool = True) -> list[str]:
    """The kinds of a stream's chunks, runs of one kind collapsed, per choice index
    (without the finish reason's word where the choices finished differently)."""
    out: list[str] = []
    indexes = sorted({c["choices"][0]["index"] for c in chunks if c.get("choices")} or {0})
    for index in indexes:
        kinds = [kind_of(c) for c in chunks if not c.get("choices") or c["choices"][0]["index"] == index]
        kinds = kinds if reasons else [re.sub(r"finish \w+", "finish", k) for k in kinds]
        out += [f"{index}: {k}" for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    return out


def answer(sims, rec: Recording):
    cache_report = rec.source["server_args"]["enable_cache_report"]
    return client(sims[cache_report]).post(rec.request["path"], json=request_body(rec))


def replayed(sims, name: str) -> tuple[Recording, httpx.Response]:
    """The recording and the double's answer to its request, which has the recorded status."""
    rec = load(RUN, name)
    r = answer(sims, rec)
    assert r.status_code == rec.status, f"{rec.cite}: {r.text[:300]}"
    return rec, r


def common_values(recorded: dict[str, Any], seen: dict[str, Any], rec: Recording) -> None:
    assert HEX32.match(seen["id"]) and HEX32.match(recorded["id"]), rec.cite
    assert seen["object"] == recorded["object"] and seen["model"] == recorded["model"], rec.cite


ERRORS = [n for n in names(RUN) if load(RUN, n).status != 200]
WHOLE = [
    n for n in names(RUN) if load(RUN, n).status == 200 and load(RUN, n).events is None and n != "chat_stop_string"
]
STREAMS = [n for n in names(RUN) if load(RUN, n).events is not None]


@pytest.mark.parametrize("name", ERRORS)
def test_refusals_match_the_recording(sims, name) -> None:
    rec, r = replayed(sims, name)
    seen = r.json()
    same_shape(rec.response, seen, True, rec.cite)
    assert (seen["type"], seen["code"]) == (rec.response["type"], rec.response["code"]), rec.cite
    if name == "bad_request":  # FastAPI's str(exc) (the error, where it failed), then exc.errors()
        assert seen["message"] == rec.response["message"], f"{rec.cite}: {seen['message']!r}"
    else:
        assert without_numbers(seen["message"]) == without_numbers(rec.response["message"]), rec.cite


@pytest.mark.parametrize("name", WHOLE)
def test_whole_answers_match_the_recording(sims, name) -> None:
    rec, r = replayed(sims, name)
    seen = r.json()
    common_values(rec.response, seen, rec)
    assert sorted(c["index"] for c in seen["choices"]) == sorted(c["index"] for c in rec.response["choices"])
    # The stub's choices may finish differently (one at EOS, one at max_tokens): each
    # of the double's is compared with a recorded choice that finished alike.
    recorded = {c["finish_reason"]: c for c in rec.response["choices"]}
    for choice in seen["choices"]:
        theirs = recorded.get(choice["finish_reason"])
        assert theirs is not None, f"{rec.cite}: finish {choice['finish_reason']!r} not in {sorted(recorded)}"
        assert type(choice["matched_stop"]) is type(theirs["matched_stop"]), rec.cite
        alike = {**rec.response, "choices": [theirs]}
        same_shape(token_keyed(alike), token_keyed({**seen, "choices": [choice]}), True, rec.cite)
    assert list(seen["usage"]) == list(rec.response["usage"]), rec.cite  # SGLang's keys, in its order


def test_a_stop_string_is_the_matched_stop(sims) -> None:
    rec = load(RUN, "chat_stop_string")  # the stub's text ended where the stop string began
    c = client(sims[False])
    body = {**rec.request["body"], "stop": None}
    text = c.post(rec.request["path"], json=body).json()["choices"][0]["message"]["content"]
    stop = text.split()[2]  # a word of the double's own answer, as "." was of the stub's
    seen = c.post(rec.request["path"], json={**body, "stop": [stop]}).json()
    same_shape(rec.response, seen, True, rec.cite)
    recorded, choice = rec.response["choices"][0], seen["choices"][0]
    assert (choice["finish_reason"], choice["matched_stop"]) == (recorded["finish_reason"], stop), rec.cite
    assert stop not in choice["message"]["content"] and recorded["matched_stop"] not in recorded["message"]["content"]


@pytest.mark.parametrize("name", STREAMS)
def test_streams_match_the_recording(sims, name) -> None:
    rec, r = replayed(sims, name)
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]" == rec.events[-1], rec.cite
    chunks = [json.loads(f) for f in frames[:-1]]
    mixed = len({c["choices"][0]["finish_reason"] for c in rec.chunks if c.get("choices")} - {None}) > 1
    assert layout(chunks, not mixed) == layout(rec.chunks, not mixed), rec.cite

    def kind(chunk: dict[str, Any]) -> str:
        return re.sub(r"finish \w+", "finish", kind_of(chunk)) if mixed else kind_of(chunk)

    for k in {kind(c) for c in rec.chunks}:
        recorded = next(c for c in rec.chunks if kind(c) == k)
        seen = next(c for c in chunks if kind(c) == k)
        if k != "error":
            common_values(recorded, seen, rec)
        same_shape(token_keyed(recorded), token_keyed(seen), True, f"{rec.cite} ({k} chunk)")
        assert list(seen) == list(recorded), f"{rec.cite} ({k} chunk): key order"
