"""When a paced stream's first frames leave the simulators: the status line and headers
at once, the first frame only after the modelled prefill.

vLLM's and trtllm-serve's role chunk is written in the first pass of their stream
generators' loop over the engine's outputs (vLLM: `chat_completion_stream_generator`,
`first_iteration`; TensorRT-LLM: `chat_stream_post_processor`, `first_iteration`), so it
leaves with the first token, after the prefill; the HTTP head goes out when the
streaming response starts, before any output. A double that sent the role chunk first
would give the gateway a first byte the runtime never sends that early (docs/runtimes.md)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.simulators.conftest import chat

TTFT_MS = 1200


@pytest.mark.parametrize("kind", ["vllm", "trtllm", "sglang", "tgi"])
def test_the_head_goes_at_once_and_the_first_frame_after_the_prefill(make_sim, kind) -> None:
    sim = make_sim(kind)
    body = chat(f"x [[sim:ttft_ms={TTFT_MS}]]", max_tokens=3, stream=True)
    path = "/generate_stream" if kind == "tgi" else "/v1/chat/completions"
    if kind == "tgi":
        body = {"inputs": f"x [[sim:ttft_ms={TTFT_MS}]]", "parameters": {"max_new_tokens": 3}}
    start = time.monotonic()
    with httpx.stream("POST", sim.url + path, json=body, timeout=10) as r:
        head_s = time.monotonic() - start
        assert r.status_code == 200
        chunks = r.iter_bytes()
        first = next(chunks)
        first_s = time.monotonic() - start
        rest = b"".join(chunks)
    assert head_s < TTFT_MS / 1000 * 0.6, f"the head waited {head_s:.2f}s, as if for the prefill"
    assert first_s >= TTFT_MS / 1000 * 0.9, f"the first frame left after {first_s:.2f}s, before the prefill"
    frames = [f for f in (first + rest).decode().split("\n\n") if f.startswith("data:")]
    payloads = [json.loads(f[5:]) for f in frames if f.strip() != "data: [DONE]"]
    if kind in ("vllm", "trtllm"):  # the role chunk is still the first frame
        role = {"role": "assistant", "content": ""} if kind == "vllm" else {"role": "assistant"}
        assert payloads[0]["choices"][0]["delta"] == role
        assert any(p["choices"] and p["choices"][0]["delta"].get("content") for p in payloads[1:])
