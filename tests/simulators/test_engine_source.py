"""`--source engine`: real generation on the built-in tiny model behind a runtime's wire."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.simulators.conftest import chat, client, sse_frames, sse_json

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def sim(make_sim):
    return make_sim("vllm", source="engine", max_model_len=256, output_tokens=6, timeout=180)


def test_engine_generates_through_the_vllm_wire(sim) -> None:
    c = client(sim)
    body = c.post("/v1/chat/completions", json=chat(max_tokens=5, seed=3, temperature=0)).json()
    again = c.post("/v1/chat/completions", json=chat(max_tokens=5, seed=3, temperature=0)).json()
    assert body["choices"][0]["message"]["content"] == again["choices"][0]["message"]["content"]
    usage = body["usage"]
    assert usage["completion_tokens"] == 5 and body["choices"][0]["finish_reason"] == "length"
    # real tokenizer and chat template: far more tokens than the synthetic word rule's 4
    assert usage["prompt_tokens"] > 4
    raw = c.post(
        "/v1/chat/completions", json=chat(max_tokens=4, stream=True, stream_options={"include_usage": True})
    ).text
    assert sse_frames(raw)[-1] == "[DONE]"
    assert sse_json(raw)[-1]["usage"]["completion_tokens"] == 4
    assert c.get("/_sim/stats").json()["source"] == "engine"


def test_engine_context_check_counts_real_tokens(sim) -> None:
    r = client(sim).post("/v1/completions", json={"prompt": "hello " * 300})
    assert r.status_code == 400 and "maximum context length is 256 tokens" in r.json()["error"]["message"]


def test_engine_disconnect_is_recorded(sim) -> None:
    sim.reset()
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        with c.stream("POST", "/v1/chat/completions", json=chat(stream=True, max_tokens=200, ignore_eos=True)) as r:
            for line in r.iter_lines():
                if '"content"' in line and '"content":""' not in line:
                    break
    deadline = time.monotonic() + 5
    while sim.stats()["aborted"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sim.stats()["aborts"][0]["how"] == "disconnect"
