"""The SGLang double against SGLang's own test assertions (tests/adapters/recordings/sglang,
the same files the adapter replays): each recorded request is sent to the double, set
up as the runtime's test set up its server, and the answer is compared with the
recording: the status, what the test asserts, and the keys and value types of the
part of the answer the recording stands for."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.adapters.recorded import Recording, load, names
from tests.simulators.conftest import client, sse_frames
from tests.simulators.test_tgi_recordings import same_shape

SERVED = "test_model_name"  # test_strict_model_validation.py's --served-model-name
CONTEXT = 1000  # test_request_length_validation.py's --context-length


@pytest.fixture(scope="module")
def sim(make_sim):
    return make_sim(
        "sglang",
        model_name=SERVED,
        max_model_len=CONTEXT,
        check_model_name=True,
        enable_cache_report=True,
        tool_call_parser="qwen25",
        health_latency=0.2,
    )


def marked(body: dict[str, Any], marker: str) -> dict[str, Any]:
    messages = [*body["messages"][:-1], {**body["messages"][-1]}]
    messages[-1]["content"] += f" [[sim:{marker}]]"
    return {**body, "messages": messages}


def request_body(rec: Recording) -> dict[str, Any]:
    """The recorded request as the double needs it: the served model (as the test's
    client sent its server's), and a marker where the test relied on its model."""
    body = json.loads(json.dumps(rec.request["body"]))
    if rec.name != "unknown_model":
        body["model"] = SERVED
    if rec.name == "usage_reasoning_tokens":
        body["max_tokens"] = 64  # its server had the model's whole context, not CONTEXT
    if rec.name.startswith("context_length"):
        body = marked(body, "prompt_tokens=1203")  # the test's 1200 words and the template
    if rec.name in ("tool_args_remainder", "kimi_tool_call"):
        body = marked(body, "tool_call")
        body["tools"] = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    return body


# The transcribed assertions; v0.5.23/ (our own run of SGLang) is checked by test_sglang_run.py.
ERRORS = [n for n in names("sglang") if "/" not in n and load("sglang", n).status != 200]


@pytest.mark.parametrize("name", ERRORS)
def test_refusals_match_the_recording(sim, name) -> None:
    rec = load("sglang", name)
    r = client(sim).post(rec.request["path"], json=request_body(rec))
    assert r.status_code == rec.status == rec.source["asserted"]["status"], f"{rec.cite}: {r.text[:200]}"
    seen = r.json()
    assert set(seen) == set(rec.response), rec.cite  # the flat ErrorResponse, param included
    same_shape(rec.response, seen, True, rec.cite)
    for fragment in rec.source["asserted"]["message_contains"]:
        assert fragment in seen["message"], f"{rec.cite}: {seen['message']!r}"


def test_the_served_name_and_its_lora_form_pass(sim) -> None:
    c = client(sim)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for model in (SERVED, f"{SERVED}:adapter", None):
        r = c.post("/v1/chat/completions", json={**body, "model": model} if model else body)
        assert r.status_code == 200, (model, r.text[:200])


def test_late_tool_arguments_are_a_piece_without_finish(sim) -> None:
    rec = load("sglang", "tool_args_remainder")
    r = client(sim).post(rec.request["path"], json=request_body(rec))
    frames = [f for f in sse_frames(r.text) if f != "[DONE]"]
    pieces = [f for f in frames if '"tool_calls"' in f and '"name":null' in f]
    assert pieces, frames
    for fragment in rec.source["asserted"]["frame_contains"][::2]:  # '"arguments":', '"finish_reason":null'
        assert all(fragment in f for f in pieces), fragment
    same_shape(rec.chunks[0], json.loads(pieces[-1]), False, rec.cite)
    finishes = [json.loads(f)["choices"][0] for f in frames if '"finish_reason":"' in f]
    assert [c["finish_reason"] for c in finishes] == ["tool_calls"] and "tool_calls" not in json.dumps(
        finishes[0]["delta"]
    )  # the finish follows in a chunk of its own


def test_whole_tool_call_answer(sim) -> None:
    rec = load("sglang", "kimi_tool_call")
    seen = client(sim).post(rec.request["path"], json=request_body(rec)).json()
    same_shape(rec.response, seen, False, rec.cite)  # the id is a string either way (call_…, not kimi's)
    assert seen["choices"][0]["finish_reason"] == rec.response["choices"][0]["finish_reason"]


def test_usage_with_top_level_reasoning_tokens(sim) -> None:
    rec = load("sglang", "usage_reasoning_tokens")
    seen = client(sim).post(rec.request["path"], json=request_body(rec)).json()["usage"]
    assert list(seen) == list(rec.response["usage"])  # SGLang's keys, in its order
    assert isinstance(seen["reasoning_tokens"], int)  # 0 here: the double does not reason


def test_a_repeated_prompt_has_all_but_its_last_token_cached(sim) -> None:
    rec = load("sglang", "cached_tokens")
    c = client(sim)
    body = request_body(rec)
    first = c.post(rec.request["path"], json=body).json()["usage"]
    again = c.post(rec.request["path"], json=body).json()["usage"]
    same_shape(rec.response["usage"], again, False, rec.cite)
    assert first["prompt_tokens_details"]["cached_tokens"] < again["prompt_tokens_details"]["cached_tokens"]
    assert again["prompt_tokens_details"]["cached_tokens"] == again["prompt_tokens"] - 1
