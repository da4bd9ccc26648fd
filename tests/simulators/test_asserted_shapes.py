"""The SGLang and TRT-LLM doubles against what those runtimes' own test suites assert
about their answers (they record no answers; tests/adapters/recordings/README.md).
Each test names the runtime's test it follows."""

from __future__ import annotations

import pytest

from tests.simulators.conftest import chat, client, sse_json

SGLANG_SERVER_TESTS = "sgl-project/sglang@0a0dd359:test/srt/openai_server/basic/test_openai_server.py"
SGLANG_MATCHED_STOP = "sgl-project/sglang@2d369f69:test/srt/openai_server/validation/test_matched_stop.py"
TRTLLM_CHAT_TESTS = "NVIDIA/TensorRT-LLM@0bd88711:tests/unittest/llmapi/apps/_test_openai_chat.py"


@pytest.fixture(scope="module")
def sglang(make_sim):
    return make_sim("sglang")


@pytest.fixture(scope="module")
def trtllm(make_sim):
    return make_sim("trtllm")


def test_sglang_chat_stream_per_index(sglang) -> None:
    # SGLANG_SERVER_TESTS run_chat_completion_stream: each index starts with role assistant and
    # gets exactly one finish_reason chunk; the usage chunk counts prompt and completion.
    body = chat(n=2, stream=True, stream_options={"include_usage": True}, max_tokens=4)
    chunks = sse_json(client(sglang).post("/v1/chat/completions", json=body).text)
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == index]
        assert mine[0]["delta"]["role"] == "assistant"
        assert len([c for c in mine if c["finish_reason"] is not None]) == 1
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and min(usage["prompt_tokens"], usage["completion_tokens"]) > 0


def test_sglang_completions_of_a_list_of_prompts(sglang) -> None:
    # SGLANG_SERVER_TESTS run_completion: len(choices) == prompts * n, and prompt_tokens counts
    # every prompt once; run_completion_stream: every index appears in the stream.
    c = client(sglang)
    one = c.post("/v1/completions", json={"prompt": "The capital of France is", "max_tokens": 4}).json()
    both = {"prompt": ["The capital of France is"] * 2, "max_tokens": 4, "n": 2}
    body = c.post("/v1/completions", json=both).json()
    assert len(body["choices"]) == 4 and sorted(ch["index"] for ch in body["choices"]) == [0, 1, 2, 3]
    assert body["usage"]["prompt_tokens"] == 2 * one["usage"]["prompt_tokens"]
    chunks = sse_json(c.post("/v1/completions", json={**both, "stream": True}).text)
    assert {ch["choices"][0]["index"] for ch in chunks if ch["choices"]} == {0, 1, 2, 3}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_sglang_matched_stop(sglang, path) -> None:
    # SGLANG_MATCHED_STOP: a stop string is reported as itself, EOS as its token id, a length
    # finish as null.
    c = client(sglang)

    def ask(**extra) -> dict:
        base = chat("tell a story") if path.endswith("chat/completions") else {"prompt": "tell a story"}
        return c.post(path, json={**base, **extra}).json()["choices"][0]

    eos = ask(max_tokens=1000)
    assert eos["finish_reason"] == "stop" and isinstance(eos["matched_stop"], int)
    length = ask(max_tokens=5)
    assert length["finish_reason"] == "length" and length["matched_stop"] is None
    text = (eos.get("message") or {}).get("content") or eos.get("text") or ""
    stop = text.split()[2]
    stopped = ask(max_tokens=1000, stop=[stop])
    assert stopped["finish_reason"] == "stop" and stopped["matched_stop"] == stop


def test_trtllm_chat_stream_finishes_once_and_matches_the_answer(trtllm) -> None:
    # TRTLLM_CHAT_TESTS test_chat_streaming: one finish_reason per stream, role assistant where
    # it appears, and the streamed text equals the non-streamed answer.
    c = client(trtllm)
    body = chat("what is 1+1?", max_completion_tokens=10, temperature=0.0)
    whole = c.post("/v1/chat/completions", json=body).json()["choices"][0]
    choices = [ch["choices"][0] for ch in sse_json(c.post("/v1/chat/completions", json={**body, "stream": True}).text)]
    assert len([ch for ch in choices if ch.get("finish_reason")]) == 1
    assert all(ch["delta"].get("role", "assistant") == "assistant" for ch in choices)
    assert "".join(ch["delta"].get("content") or "" for ch in choices) == whole["message"]["content"]
    assert choices[-1]["finish_reason"] == whole["finish_reason"]


def test_trtllm_stream_options(trtllm) -> None:
    # TRTLLM_CHAT_TESTS test_chat_completion_stream_options.
    c = client(trtllm)
    body = chat("What is the capital of France?", max_completion_tokens=10, stream=True)

    def chunks(options: dict) -> list[dict]:
        return sse_json(c.post("/v1/chat/completions", json={**body, "stream_options": options}).text)

    assert all(ch.get("usage") is None for ch in chunks({"include_usage": False}))
    final = chunks({"include_usage": True, "continuous_usage_stats": False})
    assert all(ch.get("usage") is None for ch in final if ch["choices"])
    usage = final[-1]["usage"]
    assert final[-1]["choices"] == [] and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    for ch in chunks({"include_usage": True, "continuous_usage_stats": True}):
        u = ch["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    for options in ({"include_usage": None}, {"include_usage": True}):
        refused = c.post("/v1/chat/completions", json={**body, "stream": False, "stream_options": options})
        assert refused.status_code == 400
