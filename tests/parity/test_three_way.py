"""Three implementations, one set of weights (`make test-parity`, marker `parity`): the
native engine and vLLM serve make-tiny's HF directory, llama.cpp its F32 GGUF
(engine/gguf_export.py). Through one gateway, greedy chat answers must be the same token
for token (compared by each token's bytes, from logprobs), and `/tokenize` must give
the HF tokenizer's ids on every runtime.

Random weights spread the logits (engine/make_tiny.py), so greedy choices are far from
ties; llama.cpp runs with an F32 KV cache (processes/llamacpp.py), without which long
answers drift by rounding. The counts are printed (docs/runtimes.md states them)."""

from __future__ import annotations

import os

import httpx
import pytest
from tokenizers import Tokenizer

from processes import VLLM_CPU_ENV, VLLM_PYTHON, free_port, vllm_server_argv
from tests.llamacpp_tier import backend, start_llamacpp, tiny_model
from tests.procs import Process, start_native_gateway

pytestmark = pytest.mark.parity

MAX_TOKENS = 256
PROMPTS = [
    "Tell me about rivers please",
    "What is the weather like in Paris?",
    "Write a short story about a robot who learns to paint.",
    "Numbers: 1 2 3 4 5",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "Summarize the following text and list the three most important points.",
    "Café, naïve, über: 你好",
]
TEXTS = [*PROMPTS, "  two  spaces\n\nand lines\tand tabs", "def main():\n    return 42\n", "<tool_call> not special"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("parity"))


@pytest.fixture(scope="module")
def llamacpp(model_dir, tmp_path_factory):
    p = start_llamacpp(model_dir, tmp_path_factory.mktemp("llamacpp"), slot_ctx=4096)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def vllm(model_dir, tmp_path_factory):
    if not VLLM_PYTHON.exists():
        pytest.fail("no .venv-vllm: run `make test-parity` (it runs scripts/install-vllm.sh first)")
    port = free_port()
    p = Process(
        vllm_server_argv(model_dir, port, 4096),
        f"http://127.0.0.1:{port}",
        tmp_path_factory.mktemp("vllm") / "vllm.log",
        env=VLLM_CPU_ENV,
    )
    try:
        p.wait_ready("/health", timeout=float(os.environ.get("VLLM_START_TIMEOUT", "600")))
    except Exception:
        p.stop()
        raise
    yield p
    p.stop()


def gateway_for(tmp, model_dir, llamacpp, vllm=None):
    models = {
        "native": {"backends": [{"name": "native", "adapter": "native", "model_path": str(model_dir)}]},
        "llamacpp": {"backends": [backend(llamacpp)]},
    }
    if vllm is not None:
        vllm_backend = {"name": "vllm", "adapter": "vllm", "url": vllm.url, "served_model": "tiny"}
        models["vllm"] = {"backends": [vllm_backend]}
    return start_native_gateway(tmp, {"models": models})


@pytest.fixture(scope="module")
def gateway(model_dir, llamacpp, request, tmp_path_factory):
    # vLLM starts (minutes) only when a selected test compares it.
    with_vllm = any("vllm" in item.nodeid.rsplit("::", 1)[-1] for item in request.session.items)
    vllm = request.getfixturevalue("vllm") if with_vllm else None
    gw = gateway_for(tmp_path_factory.mktemp("gw"), model_dir, llamacpp, vllm)
    yield gw
    gw.stop()


def greedy_tokens(gateway, model: str, prompt: str) -> tuple[list[bytes], int]:
    """The answer's tokens (each token's bytes) and its prompt token count."""
    r = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "ignore_eos": True,
            "logprobs": True,
        },
        timeout=600,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    content = body["choices"][0]["logprobs"]["content"]
    return [bytes(t["bytes"]) for t in content], body["usage"]["prompt_tokens"]


def agreeing(a: list[bytes], b: list[bytes]) -> int:
    """`a`'s tokens that lie inside the bytes both answers share from the start. By bytes,
    not token lists: llama.cpp leaves out the logprobs of a token held back (a partial
    UTF-8 character), so its list can be shorter for the same text."""
    x, y = b"".join(a), b"".join(b)
    common = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    n = end = 0
    for token in a:
        end += len(token)
        if end > common:
            break
        n += 1
    return n


@pytest.mark.parametrize("other", ["llamacpp", "vllm"])
def test_greedy_tokens_agree_with_the_native_engine(gateway, other):
    total = agree = 0
    for prompt in PROMPTS:
        native, native_prompt = greedy_tokens(gateway, "native", prompt)
        theirs, their_prompt = greedy_tokens(gateway, other, prompt)
        assert their_prompt == native_prompt, (other, prompt)  # the same chat template, the same ids
        assert len(native) == MAX_TOKENS
        total += len(native)
        agree += agreeing(native, theirs)
    print(f"native vs {other}: {agree}/{total} greedy tokens agree over {len(PROMPTS)} prompts")
    assert agree == total


@pytest.mark.parametrize("model", ["native", "llamacpp", "vllm"])
def test_tokenize_gives_the_hf_tokenizers_ids(gateway, model_dir, model):
    hf = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    for text in TEXTS:
        r = httpx.post(gateway.url + "/tokenize", json={"model": model, "prompt": text}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == hf.encode(text).ids, (model, text)
