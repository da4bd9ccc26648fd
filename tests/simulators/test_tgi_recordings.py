"""The TGI double against TGI's own recordings (tests/adapters/recordings/tgi): each
recorded request is sent to the double (3.3, or 3.1 for the recordings made before
3.2) and its answer is compared field by field with the recording: the keys (all of
them where the recording kept the wire's keys, the non-null ones where a client's
types filled nulls in), the value types, where usage sits, which chunks carry a
finish, the id, model and fingerprint, and the tool-call shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.adapters.recorded import Recording, load, names
from tests.simulators.conftest import client, sse_frames

MODEL = "sim-model"
# Recordings where the model chose to call a tool under tool_choice "auto": the double
# is told to do the same.
CALLED_UNDER_AUTO = {"tool_call", "v3.1/tool_call"}
# Recordings where the model stopped by itself before `max_tokens`: the double's answer
# gets the same length.
STOPPED_AFTER = {"chat_stream_usage": 3}


@pytest.fixture(scope="module")
def sims(make_sim):
    return {"3.3": make_sim("tgi", model_name=MODEL), "3.1": make_sim("tgi", model_name=MODEL, tgi_version="3.1")}


def double_for(rec: Recording) -> str:
    return "3.1" if rec.name.startswith("v3.1/") else "3.3"


def request_body(rec: Recording) -> dict[str, Any]:
    body = json.loads(json.dumps(rec.request["body"]))
    if rec.name in CALLED_UNDER_AUTO:
        body["messages"][-1]["content"] += " [[sim:tool_call]]"
    if rec.name in STOPPED_AFTER:
        body["messages"][-1]["content"] += f" [[sim:output_tokens={STOPPED_AFTER[rec.name]}]]"
    return body


def same_shape(recorded: Any, seen: Any, exact: bool, where: str) -> None:
    """`seen` has the recording's keys (all of them if `exact`, else those not null) and types."""
    if isinstance(recorded, dict):
        assert isinstance(seen, dict), f"{where}: expected an object, got {seen!r}"
        keys = set(recorded) if exact else {k for k, v in recorded.items() if v is not None}
        if exact:
            assert set(seen) == keys, f"{where}: keys {sorted(seen)} != recorded {sorted(keys)}"
        else:
            assert keys <= set(seen), f"{where}: missing {sorted(keys - set(seen))}"
        for key in keys:
            same_shape(recorded[key], seen[key], exact, f"{where}.{key}")
    elif isinstance(recorded, list):
        assert isinstance(seen, list) and bool(recorded) == bool(seen), f"{where}: {seen!r} vs recorded {recorded!r}"
        if recorded:
            same_shape(recorded[0], seen[0], exact, f"{where}[0]")
    elif recorded is not None or exact:
        assert type(seen) is type(recorded), f"{where}: {seen!r} is not a {type(recorded).__name__}"


def kind_of(chunk: dict[str, Any]) -> str:
    """What a chunk is: its role in the stream, which is what the double must place alike."""
    if not chunk["choices"]:
        return "usage"
    choice = chunk["choices"][0]
    delta = choice.get("delta")
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    if calls:
        call = calls[0] if isinstance(calls, list) else calls
        kind = "named call" if call["function"]["name"] else "call"
    else:
        kind = "text"
    finish = choice.get("finish_reason")
    return kind + (f" + finish {finish}" if finish else "") + (" + usage" if chunk.get("usage") else "")


def layout(chunks: list[dict[str, Any]]) -> list[str]:
    """The kinds of a stream's chunks, runs of one kind collapsed, per choice index."""
    out: list[str] = []
    for index in sorted({c["choices"][0]["index"] for c in chunks if c["choices"]} or {0}):
        kinds = [kind_of(c) for c in chunks if not c["choices"] or c["choices"][0]["index"] == index]
        out += [f"{index}: {k}" for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    return out


def common_values(recorded: dict[str, Any], seen: dict[str, Any], rec: Recording) -> None:
    assert seen["id"] == recorded["id"] == ""
    assert seen["object"] == recorded["object"]
    assert recorded["model"] != "tgi" and seen["model"] == MODEL  # asked for "tgi": the model id
    assert seen["system_fingerprint"].endswith("-native") and recorded["system_fingerprint"].endswith("-native")


@pytest.mark.parametrize("name", [n for n in names("tgi") if load("tgi", n).events is None])
def test_whole_answers_match_the_recording(sims, name) -> None:
    rec = load("tgi", name)
    r = client(sims[double_for(rec)]).post(rec.request["path"], json=request_body(rec))
    assert r.status_code == rec.status, f"{rec.cite}: {r.text[:200]}"
    seen = r.json()
    if rec.status != 200:
        assert seen == rec.response, rec.cite
        return
    common_values(rec.response, seen, rec)
    same_shape(rec.response, seen, rec.wire_keys, rec.cite)
    recorded_choices = sorted(c["index"] for c in rec.response["choices"])
    assert sorted(c["index"] for c in seen["choices"]) == recorded_choices
    assert [c["finish_reason"] for c in seen["choices"]] == [c["finish_reason"] for c in rec.response["choices"]]


@pytest.mark.parametrize("name", [n for n in names("tgi") if load("tgi", n).events is not None])
def test_streams_match_the_recording(sims, name) -> None:
    rec = load("tgi", name)
    r = client(sims[double_for(rec)]).post(rec.request["path"], json=request_body(rec))
    assert r.status_code == rec.status
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]" and rec.events[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    assert layout(chunks) == layout(rec.chunks), rec.cite
    for kind in {kind_of(c) for c in rec.chunks}:
        recorded = next(c for c in rec.chunks if kind_of(c) == kind)
        seen = next(c for c in chunks if kind_of(c) == kind)
        common_values(recorded, seen, rec)
        same_shape(recorded, seen, rec.wire_keys, f"{rec.cite} ({kind} chunk)")
