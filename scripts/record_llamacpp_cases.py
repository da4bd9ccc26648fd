"""Record what a real llama.cpp server writes, for the fast suite's replay tests
(tests/adapters/test_recorded_llamacpp.py): `python scripts/record_llamacpp_cases.py`.

Starts `llama-server` (scripts/install-llamacpp.sh builds it) on make-tiny's model written
as an F32 GGUF, sends each case below and keeps the answer byte for byte (`raw`) with its
parsed copy, into tests/adapters/recordings/llamacpp/<name>.json. A second server, started
with `--embeddings`, answers the embeddings case. Random weights: the texts are gibberish,
every byte around them is llama.cpp's own.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.make_tiny import make_tiny  # noqa: E402
from processes import Child, free_port, http_probe  # noqa: E402
from processes.llamacpp import LLAMA_SERVER, llamacpp_server_argv, write_gguf  # noqa: E402

OUT = ROOT / "tests" / "adapters" / "recordings" / "llamacpp"
VERSION = "llama-cpp-python 0.3.36 sdist (llama.cpp 0c1e57098)"
CONTEXT, SLOTS = 2048, 2  # two slots of 1024 positions
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
M = "tiny"
ASK = [{"role": "user", "content": "Tell me about rivers please"}]
WEATHER = [{"role": "user", "content": "What is the weather in Lyon?"}]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            # An enum: a random-weight model under the grammar would otherwise write a city forever.
            "properties": {"city": {"type": "string", "enum": ["Lyon", "Paris"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
USAGE = {"stream": True, "stream_options": {"include_usage": True}}
GREEDY = {"temperature": 0, "max_tokens": 8}
LONG = " ".join(["river"] * 1500)  # beyond one slot's 1024 positions

# name -> (method, path, body, note); body None for a GET; a str body is sent as is.
CASES: dict[str, tuple[str, str, Any, str]] = {
    "chat": ("POST", CHAT, {"model": M, "messages": ASK, **GREEDY}, "a whole chat answer"),
    "chat_stream": ("POST", CHAT, {"model": M, "messages": ASK, **GREEDY, **USAGE}, "a stream with usage"),
    "chat_stop": (
        "POST",
        CHAT,
        {"model": M, "messages": ASK, "temperature": 0, "max_tokens": 32, "stop": ["e"]},
        "a stop string (removed from the text)",
    ),
    "chat_logprobs_true": (
        "POST",
        CHAT,
        {"model": M, "messages": ASK, "temperature": 0, "max_tokens": 2, "logprobs": True},
        "logprobs: true without top_logprobs: llama.cpp sends 20 alternatives",
    ),
    "chat_logprobs_stream": (
        "POST",
        CHAT,
        {"model": M, "messages": ASK, "temperature": 0, "max_tokens": 3, "logprobs": True, "top_logprobs": 2, **USAGE},
        "streamed logprobs, two alternatives",
    ),
    "completion": ("POST", COMPLETIONS, {"model": M, "prompt": "Rivers carry", **GREEDY}, "a whole completion"),
    "completion_stream": (
        "POST",
        COMPLETIONS,
        {"model": M, "prompt": "Rivers carry", **GREEDY, "stream": True},
        "a streamed completion: usage on the last chunk without include_usage",
    ),
    "completion_logprobs": (
        "POST",
        COMPLETIONS,
        {"model": M, "prompt": "Rivers carry", "temperature": 0, "max_tokens": 2, "logprobs": 2},
        "completion logprobs, in the chat shape",
    ),
    "tool_required": (
        "POST",
        CHAT,
        {
            "model": M,
            "messages": WEATHER,
            "tools": [TOOL],
            "tool_choice": "required",
            "max_tokens": 48,
            "temperature": 0,
        },
        "tool_choice required sent as is: its grammar lets text come first (the random model writes it)",
    ),
    "tool_required_stream": (
        "POST",
        CHAT,
        {
            "model": M,
            "messages": WEATHER,
            "tools": [TOOL],
            "tool_choice": "required",
            "max_tokens": 48,
            "temperature": 0,
            **USAGE,
        },
        "the same, streamed",
    ),
    # What adapters/llamacpp.py sends for tool_choice required with a <tool_call> template.
    "tool_forced": (
        "POST",
        CHAT,
        {
            "model": M,
            "messages": [*WEATHER, {"role": "assistant", "content": "<tool_call>\n"}],
            "tools": [TOOL],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "stop": ["</tool_call>"],
            "max_tokens": 128,  # the random model pads the call with whitespace the grammar allows
            "temperature": 0,
        },
        "tool_choice required as the dialect sends it: the call opened, one call",
    ),
    "tool_forced_stream": (
        "POST",
        CHAT,
        {
            "model": M,
            "messages": [*WEATHER, {"role": "assistant", "content": "<tool_call>\n"}],
            "tools": [TOOL],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "stop": ["</tool_call>"],
            "max_tokens": 128,  # the random model pads the call with whitespace the grammar allows
            "temperature": 0,
            **USAGE,
        },
        "the same, streamed",
    ),
    "json_schema": (
        "POST",
        CHAT,
        {
            "model": M,
            "messages": ASK,
            "temperature": 0,
            "max_tokens": 32,
            "response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "schema": SCHEMA}},
        },
        "structured output by json_schema",
    ),
    "context_overflow": (
        "POST",
        CHAT,
        {"model": M, "messages": [{"role": "user", "content": LONG}], "max_tokens": 4},
        "a prompt beyond the slot's context",
    ),
    "context_overflow_stream": (
        "POST",
        CHAT,
        {"model": M, "messages": [{"role": "user", "content": LONG}], "max_tokens": 4, "stream": True},
        "the same, streamed: an HTTP error, not an SSE event",
    ),
    "n_above_slots": ("POST", CHAT, {"model": M, "messages": ASK, "max_tokens": 2, "n": 3}, "n above the slot count"),
    "bad_response_format": (
        "POST",
        CHAT,
        {"model": M, "messages": ASK, "max_tokens": 2, "response_format": {"type": "xml"}},
        "an unknown response_format type",
    ),
    "malformed_json": ("POST", CHAT, '{"model": "tiny", "messages": [', "a malformed body: llama.cpp answers 500"),
    "tokenize": ("POST", "/tokenize", {"content": "Hello world 42", "add_special": False}, "token ids"),
    "detokenize": ("POST", "/detokenize", {"tokens": [1, 2, 300, 301]}, "text of ids"),
    "apply_template": ("POST", "/apply-template", {"messages": ASK}, "the chat template rendered"),
    "props": ("GET", "/props", None, "the server's conditions"),
    "slots": ("GET", "/slots", None, "the slots, idle"),
    "metrics": ("GET", "/metrics", None, "llamacpp:* after the cases above"),
    "health": ("GET", "/health", None, "ready"),
    "models": ("GET", "/v1/models", None, "the one model"),
}
EMBEDDING_CASES = {
    "embeddings": ("POST", "/v1/embeddings", {"model": M, "input": ["rivers", "the sea"]}, "with --embeddings"),
}


def record_of(name: str, method: str, path: str, body: Any, note: str, resp: httpx.Response, args: list[str]) -> dict:
    raw = resp.content.decode("utf-8")
    content_type = resp.headers.get("content-type", "")
    rec: dict[str, Any] = {
        "source": {
            "runtime": "llamacpp",
            "version": VERSION,
            "recorded_by": "scripts/record_llamacpp_cases.py",
            "server_args": args,
            "wire_keys": True,
            "notes": note,
        },
        "request": {"method": method, "path": path, "body": body},
        "status": resp.status_code,
        "content_type": content_type,
        "raw": raw,
    }
    if content_type.startswith("text/event-stream"):
        frames = [f for f in raw.split("\n\n") if f]
        rec["events"] = [
            f.removeprefix("data: ") if f.removeprefix("data: ") == "[DONE]" else json.loads(f.removeprefix("data: "))
            for f in frames
            if f.startswith("data: ")
        ]
    elif content_type.startswith("application/json"):
        rec["response"] = json.loads(raw)
    else:
        rec["response"] = raw
    return rec


def start(gguf: Path, work: Path, name: str, **kw: Any) -> tuple[Child, str, list[str]]:
    port = free_port()
    argv = llamacpp_server_argv(gguf, port, CONTEXT, parallel=SLOTS, alias=M, **kw)
    child = Child(argv, work / f"{name}.log", name=name)
    url = f"http://127.0.0.1:{port}"
    child.wait_ready(http_probe(url + "/health"), timeout_s=120)
    shown = [a if not a.endswith(".gguf") else "tiny.gguf" for a in argv[1:]]
    return child, url, [a if a != str(port) else "<port>" for a in shown]


def run(cases: dict[str, tuple[str, str, Any, str]], url: str, args: list[str]) -> None:
    with httpx.Client(base_url=url, timeout=120) as http:
        for name, (method, path, body, note) in cases.items():
            if body is None:
                resp = http.get(path)
            elif isinstance(body, str):
                resp = http.post(path, content=body, headers={"content-type": "application/json"})
            else:
                resp = http.post(path, json=body)
            rec = record_of(name, method, path, body, note, resp, args)
            (OUT / f"{name}.json").write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"{name}: {resp.status_code}")


def main() -> None:
    if not LLAMA_SERVER.exists():
        sys.exit(f"{LLAMA_SERVER} is missing: run scripts/install-llamacpp.sh first")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gguf = write_gguf(make_tiny(work / "tiny", seed=0), work / "tiny.gguf")
        started = time.monotonic()
        server, url, args = start(gguf, work, "llama-server")
        try:
            run(CASES, url, args)
        finally:
            server.stop()
        server, url, args = start(gguf, work, "llama-server-embeddings", embeddings=True, extra=("--pooling", "mean"))
        try:
            run(EMBEDDING_CASES, url, args)
        finally:
            server.stop()
        print(f"recorded {len(CASES) + len(EMBEDDING_CASES)} cases in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
