"""Guided decoding as each runtime exposes it (docs/runtimes.md §6, "Structured
output"), over HTTP: the fields each one reads, the documents it writes (valid
against the schema, streamed in pieces, cut by `max_tokens`), and its refusals."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from tests.simulators.conftest import TOOLS, chat, client, sse_frames, sse_json

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 3},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days", "unit"],
    "additionalProperties": False,
}
OPENAI_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}


@pytest.fixture(scope="module")
def sims(make_sim):
    return {kind: make_sim(kind) for kind in ("vllm", "sglang", "trtllm", "tgi")}


def content(body: dict) -> str:
    return body["choices"][0]["message"]["content"]


def streamed(raw: str) -> tuple[str, list[str | None]]:
    chunks = [c for c in sse_json(raw) if c.get("choices")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    return text, [c["choices"][0].get("finish_reason") for c in chunks]


@pytest.mark.parametrize(
    "kind, fmt",
    [
        ("vllm", OPENAI_FORMAT),
        ("sglang", OPENAI_FORMAT),
        ("trtllm", OPENAI_FORMAT),
        ("trtllm", {"type": "json", "schema": SCHEMA}),
        ("tgi", {"type": "json", "value": SCHEMA}),
        ("tgi", {"type": "json_schema", "value": {"name": "weather", "schema": SCHEMA}}),
    ],
)
def test_json_schema_documents_validate_whole_and_streamed(sims, kind, fmt) -> None:
    c = client(sims[kind])
    docs = set()
    for prompt in ("weather in paris", "weather in lima", "and tokyo"):
        body = c.post("/v1/chat/completions", json=chat(prompt, response_format=fmt, max_tokens=200)).json()
        jsonschema.validate(json.loads(content(body)), SCHEMA)
        assert body["choices"][0]["finish_reason"] == "stop"
        docs.add(content(body))
        raw = c.post("/v1/chat/completions", json=chat(prompt, response_format=fmt, max_tokens=200, stream=True)).text
        text, finishes = streamed(raw)
        assert text == content(body)  # the same request, the same document, in pieces
        assert len([f for f in finishes if f is None]) > 3 and "stop" in finishes
    assert len(docs) > 1
    # TGI's grammar is a regex without optional whitespace: its documents are compact.
    assert all((", " in d) != (kind == "tgi") for d in docs)


@pytest.mark.parametrize("kind", ["vllm", "sglang", "trtllm", "tgi"])
def test_max_tokens_cuts_the_document_with_length(sims, kind) -> None:
    fmt = {"type": "json", "value": SCHEMA} if kind == "tgi" else OPENAI_FORMAT
    c = client(sims[kind])
    body = c.post("/v1/chat/completions", json=chat("x", response_format=fmt, max_tokens=3)).json()
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 3
    with pytest.raises(ValueError):
        json.loads(content(body))
    raw = c.post("/v1/chat/completions", json=chat("x", response_format=fmt, max_tokens=3, stream=True)).text
    text, finishes = streamed(raw)
    assert text == content(body) and "length" in finishes


@pytest.mark.parametrize("kind", ["vllm", "sglang", "trtllm"])
def test_json_object_is_a_json_object(sims, kind) -> None:
    body = client(sims[kind]).post("/v1/chat/completions", json=chat(response_format={"type": "json_object"})).json()
    assert isinstance(json.loads(content(body)), dict)


def test_vllm_structured_outputs(sims) -> None:
    c = client(sims["vllm"])

    def ask(outputs: dict, **extra) -> dict:
        return c.post("/v1/chat/completions", json=chat(structured_outputs=outputs, **extra)).json()

    assert re.fullmatch(r"\d{3}-[a-z]{2}", content(ask({"regex": r"\d{3}-[a-z]{2}"})))
    assert content(ask({"choice": ["left", "right"]})) in ("left", "right")
    assert content(ask({"grammar": 'root ::= "a" | "b"'})) in ("a", "b")
    jsonschema.validate(json.loads(content(ask({"json": json.dumps(SCHEMA)}))), SCHEMA)
    both = c.post("/v1/chat/completions", json=chat(structured_outputs={"regex": "a", "choice": ["b"]}))
    assert both.status_code == 400 and "only use one kind of structured outputs" in both.json()["error"]["message"]
    mixed = c.post("/v1/chat/completions", json=chat(structured_outputs={"regex": "a"}, response_format=OPENAI_FORMAT))
    assert mixed.status_code == 400
    missing = c.post("/v1/chat/completions", json=chat(response_format={"type": "json_schema"})).json()["error"]
    assert missing["param"] == "response_format" and missing["type"] == "Bad Request"
    assert "'json_schema' field must be provided" in missing["message"]
    legacy = c.post("/v1/chat/completions", json=chat(guided_regex=r"\d+"))
    assert legacy.status_code == 200 and not re.fullmatch(r"\d+", content(legacy.json()))  # removed: ignored


def test_sglang_regex_ebnf_and_their_exclusion(sims) -> None:
    c = client(sims["sglang"])
    body = c.post("/v1/chat/completions", json=chat(regex=r"[A-Z]{2}\d")).json()
    assert re.fullmatch(r"[A-Z]{2}\d", content(body))
    body = c.post("/v1/chat/completions", json=chat(ebnf='root ::= "yes" | "no"')).json()
    assert content(body) in ("yes", "no")
    completion = c.post("/v1/completions", json={"prompt": "x", "json_schema": json.dumps(SCHEMA)}).json()
    jsonschema.validate(json.loads(completion["choices"][0]["text"]), SCHEMA)
    r = c.post("/v1/chat/completions", json=chat(regex="a", response_format=OPENAI_FORMAT))
    assert r.status_code == 400 and r.json()["message"] == "Only one of regex, json_schema, or ebnf can be set."
    r = c.post("/v1/chat/completions", json=chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}))
    assert r.status_code == 400 and r.json()["object"] == "error"
    native = c.post("/generate", json={"text": "x", "sampling_params": {"regex": "(up|down)"}}).json()
    assert native["text"] in ("up", "down")


def test_trtllm_refusals(sims) -> None:
    c = client(sims["trtllm"])
    r = c.post("/v1/chat/completions", json=chat(response_format={"type": "json"}))
    assert r.status_code == 400
    assert r.json()["message"] == "response_format.schema is required for response_format.type == 'json', but got None."
    r = c.post("/v1/chat/completions", json=chat(response_format={"type": "json_schema", "value": SCHEMA}))
    assert r.status_code == 400 and "Extra inputs are not permitted" in r.json()["error"]  # a validation string
    r = c.post("/v1/chat/completions", json=chat(response_format={"type": "xml"}))
    assert r.status_code == 400 and "literal_error" in r.json()["error"]
    bare = {"type": "json_schema", "json_schema": SCHEMA}  # a bare schema is read as the schema
    jsonschema.validate(
        json.loads(content(c.post("/v1/chat/completions", json=chat(response_format=bare)).json())), SCHEMA
    )
    body = c.post("/v1/chat/completions", json=chat(response_format={"type": "regex", "regex": "[xy]{4}"})).json()
    assert re.fullmatch("[xy]{4}", content(body))


def test_tgi_grammar_refusals(sims) -> None:
    c = client(sims["tgi"])
    r = c.post("/v1/chat/completions", json=chat(response_format=OPENAI_FORMAT))  # OpenAI's shape: no `value`
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/plain")
    assert "response_format: missing field `value`" in r.text
    r = c.post("/v1/chat/completions", json=chat(response_format={"type": "json", "value": {"type": "object"}}))
    assert r.status_code == 422 and r.json() == {
        "error": "Input validation error: grammar is not valid: Grammar must have a 'properties' field",
        "error_type": "validation",
    }
    r = c.post(
        "/v1/chat/completions", json=chat(response_format={"type": "json", "value": {"type": "object"}}, stream=True)
    )
    frames = sse_frames(r.text)
    assert r.status_code == 200 and frames[-1] == "[DONE]"
    assert json.loads(frames[0])["error"]["http_status_code"] == 422
    array = {"name": "ids", "schema": {"type": "array", "items": {"type": "integer"}}}  # no root properties either
    r = c.post("/v1/chat/completions", json=chat(response_format={"type": "json_schema", "value": array}))
    assert r.status_code == 422 and "Grammar must have a 'properties' field" in r.json()["error"]
    r = c.post("/v1/chat/completions", json=chat(response_format={"type": "json", "value": SCHEMA}, tools=TOOLS))
    assert r.status_code == 422 and r.json()["error_type"] == "tool_error"
    body = c.post("/v1/chat/completions", json=chat(response_format={"type": "regex", "value": "[0-9]{5}"})).json()
    assert re.fullmatch("[0-9]{5}", content(body))
    native = c.post("/generate", json={"inputs": "x", "parameters": {"grammar": {"type": "json", "value": SCHEMA}}})
    jsonschema.validate(json.loads(native.json()["generated_text"]), SCHEMA)


def test_tgi_writes_declared_properties_only(sims) -> None:
    fmt = {"type": "json", "value": {"type": "object", "properties": {}}}
    body = client(sims["tgi"]).post("/v1/chat/completions", json=chat(response_format=fmt)).json()
    assert content(body) == "{}"
