"""The native adapter reuses the token ids precise routing computed for a prompt
(adapters/native.py SharedTokenizer): the same ids the engine would compute, only
from the very tokenizer object of the backend that serves it, only for the same prompt."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path

import pytest

from adapters.base import GenerationRequest, SamplingParams, TextDelta
from adapters.native import NativeAdapter
from engine.builtin import resolve_model_path
from engine.text.tokenizer import TextTokenizer

MESSAGES = [
    {"role": "system", "content": "route cache block token prefix " * 40},
    {"role": "user", "content": "which engine holds my prefix?"},
]


def chat(messages=MESSAGES, request_id="r1") -> GenerationRequest:
    return GenerationRequest(request_id, "m", messages=messages, sampling=SamplingParams(max_tokens=2))


def own_ids(model_dir: Path, messages=MESSAGES) -> list[int]:
    """What the engine's side computes for the prompt with a tokenizer of its own."""
    tok = TextTokenizer(model_dir)
    return tok.encode(
        tok.apply_chat_template(messages, tools=None, add_generation_prompt=True), add_special_tokens=False
    )


def adapter(name: str, model_path: str) -> NativeAdapter:
    a = NativeAdapter(name, model_path, served_name=name, engine_options={"max_model_len": 1024})
    asyncio.run(a.start())
    return a


@pytest.fixture(scope="module")
def tiny_pair():
    a, b = adapter("nat0", "builtin:tiny"), adapter("nat1", "builtin:tiny")
    yield a, b
    for x in (a, b):
        asyncio.run(x.aclose())


def test_routing_ids_are_the_engines_own_and_serve_every_backend_of_the_model(tiny_pair):
    a, b = tiny_pair
    assert a.tokenizer is b.tokenizer  # one model directory, one tokenizer object
    shared = a._shared
    assert shared is not None
    # prompts no earlier test of this process rendered (the shared tokenizer outlives a test, and a
    # mutation run runs the tests twice in one process and in another order)
    messages = [MESSAGES[0], {"role": "user", "content": f"which engine holds my prefix? {uuid.uuid4().hex}"}]
    req = chat(messages, request_id="reuse-1")
    before = shared.reused
    hashes = a.kv_block_hashes(req)  # routing names the blocks on one backend's tokenizer...
    assert hashes
    ids = b._prompt_ids(req)  # ...and the backend it picked does not tokenize again
    assert shared.reused == before + 1
    assert ids == own_ids(resolve_model_path("builtin:tiny"), messages)
    assert b.async_engine.engine.kv.block_hashes(ids) == hashes

    async def generate() -> str:
        return "".join([e.text async for e in b.generate(req) if isinstance(e, TextDelta)])

    assert isinstance(asyncio.run(generate()), str) and shared.reused == before + 2


def test_a_changed_prompt_is_tokenized_again(tiny_pair):
    a, b = tiny_pair
    messages = [MESSAGES[0], {"role": "user", "content": f"which engine holds my prefix? {uuid.uuid4().hex}"}]
    req = chat(messages, request_id="reuse-2")
    a.kv_block_hashes(req)
    messages[1]["content"] = f"a different question entirely {uuid.uuid4().hex}"  # changed in place after routing
    before = a._shared.reused
    assert b._prompt_ids(req) == own_ids(resolve_model_path("builtin:tiny"), messages)
    assert a._shared.reused == before


def test_another_models_tokenizer_is_never_reused(tiny_pair, tmp_path: Path):
    a, _ = tiny_pair
    # The same weights and vocabulary under another chat template: other ids for one prompt.
    other_dir = tmp_path / "tiny-other-template"
    shutil.copytree(resolve_model_path("builtin:tiny"), other_dir)
    config = json.loads((other_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = "[other] " + config["chat_template"]
    (other_dir / "tokenizer_config.json").write_text(json.dumps(config))
    c = adapter("other", str(other_dir))
    try:
        assert c.tokenizer is not a.tokenizer and c._shared is not a._shared
        req = chat(request_id="reuse-3")
        a.kv_block_hashes(req)
        ids = c._prompt_ids(req)
        assert ids == own_ids(other_dir) != own_ids(resolve_model_path("builtin:tiny"))
        assert c._shared.reused == 0
    finally:
        asyncio.run(c.aclose())
