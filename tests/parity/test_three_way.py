"""Three implementations, one set of weights (`make test-parity`, marker `parity`): the
native engine and vLLM serve make-tiny's HF directory, llama.cpp its F32 GGUF
(engine/gguf_export.py). Through one gateway, greedy chat answers must be the same token
for token, and `/tokenize` must give the HF tokenizer's ids on every runtime.

The request is one all three read alike: `ignore_eos` differs (the native engine and vLLM
emit an end token and go on, llama.cpp bans every end-of-generation token), so the
special tokens are banned by `logit_bias` for all three, and each answer's text is then
its tokens' bytes as UTF-8. Tokens are the native engine's (its logprobs carry every
token's bytes; vLLM gives a partial UTF-8 character's token no bytes, llama.cpp leaves
its entry out), compared against each runtime's text.

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


def special_ids(model_dir) -> dict[str, float]:
    """`logit_bias` banning the tokenizer's special tokens (end of turn, end of text, turn start)."""
    added = Tokenizer.from_file(str(model_dir / "tokenizer.json")).get_added_tokens_decoder()
    return {str(i): -100 for i, token in added.items() if token.special}


def greedy_answer(gateway, model: str, prompt: str, bias: dict[str, float]) -> dict:
    r = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "ignore_eos": True,
            "logit_bias": bias,
            "logprobs": True,
        },
        timeout=600,
    )
    assert r.status_code == 200, r.text
    return r.json()


def agreeing(tokens: list[bytes], text: str) -> int:
    """The longest run of `tokens` (one answer, each token's bytes) whose text begins
    `text` (another answer's). Invalid UTF-8 is replaced as the runtimes replace it."""
    return max((n for n in range(len(tokens) + 1) if text.startswith(as_text(tokens[:n]))), default=0)


def as_text(tokens: list[bytes]) -> str:
    return b"".join(tokens).decode("utf-8", errors="replace")


def judged(tokens: list[bytes]) -> int:
    """How many leading tokens end before the answer's unfinished ending, which the
    runtimes hold back and never send: vLLM any text ending in a replacement character,
    llama.cpp a lead byte among the last four with fewer bytes after it than it
    announces, valid UTF-8 or not (`validate_utf8`, tools/server/server-common.cpp)."""
    raw = b"".join(tokens)
    complete = len(raw)
    while complete and as_text([raw[:complete]]).endswith("\ufffd"):
        complete -= 1
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        announced = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 0
        if back < announced:
            complete = min(complete, len(raw) - back)
            break
    n = end = 0
    for token in tokens:
        end += len(token)
        if end > complete:
            break
        n += 1
    return n


@pytest.mark.parametrize("other", ["llamacpp", "vllm"])
def test_greedy_tokens_agree_with_the_native_engine(gateway, model_dir, other):
    bias = special_ids(model_dir)
    total = agree = unjudged = 0
    for prompt in PROMPTS:
        native = greedy_answer(gateway, "native", prompt, bias)
        theirs = greedy_answer(gateway, other, prompt, bias)
        tokens = [bytes(t["bytes"]) for t in native["choices"][0]["logprobs"]["content"]]
        text = native["choices"][0]["message"]["content"]
        assert len(tokens) == MAX_TOKENS and as_text(tokens) == text  # no special token, no lost byte
        assert theirs["usage"]["prompt_tokens"] == native["usage"]["prompt_tokens"], (other, prompt)
        assert theirs["usage"]["completion_tokens"] == MAX_TOKENS, (other, prompt)
        n = judged(tokens)
        total, unjudged = total + n, unjudged + len(tokens) - n
        agree += agreeing(tokens[:n], theirs["choices"][0]["message"]["content"])
    print(
        f"native vs {other}: {agree}/{total} greedy tokens agree over {len(PROMPTS)} prompts"
        f" ({unjudged} ending in an unfinished character not judged)"
    )
    assert agree == total


@pytest.mark.parametrize("model", ["native", "llamacpp", "vllm"])
def test_tokenize_gives_the_hf_tokenizers_ids(gateway, model_dir, model):
    hf = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    for text in TEXTS:
        r = httpx.post(gateway.url + "/tokenize", json={"model": model, "prompt": text}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == hf.encode(text).ids, (model, text)
