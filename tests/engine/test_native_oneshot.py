"""The native adapter's one-shot calls, on the tiny chat model, checked
against transformers (what vLLM runs): the tokenizer and chat template for /tokenize and
/detokenize, and the model's last-token hidden state for embeddings."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from adapters.errors import GatewayError
from adapters.oneshot import DetokenizeRequest, EmbeddingRequest, TokenizeRequest
from engine.make_tiny import make_tiny
from tests.native_adapters import started_native

transformers = pytest.importorskip("transformers")

MAX_MODEL_LEN = 128
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("native-calls") / "tiny-chat")


@pytest.fixture(scope="module")
def hf(model_dir: Path):
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    return tok, model


@pytest.fixture(scope="module")
def adapter(model_dir: Path):
    yield from started_native(model_dir, num_blocks=64, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=32)


def run(coro):
    return asyncio.run(coro)


def test_capabilities_declare_the_calls(adapter):
    assert adapter.capabilities.embeddings and adapter.capabilities.tokenize


def test_tokenize_a_prompt_as_transformers_does(adapter, hf):
    tok, _ = hf
    prompt = "The weather in Paris is <tool_call> nice"
    result = run(adapter.tokenize(TokenizeRequest("r", "m", prompt=prompt, return_token_strs=True)))
    assert result.tokens == tok(prompt, add_special_tokens=True).input_ids
    assert result.token_strs == tok.convert_ids_to_tokens(result.tokens)
    assert result.max_model_len == MAX_MODEL_LEN
    plain = run(adapter.tokenize(TokenizeRequest("r", "m", prompt=prompt)))
    assert plain.token_strs is None and plain.tokens == result.tokens


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_tokenize_messages_through_the_chat_template(adapter, hf, generation_prompt):
    tok, _ = hf
    request = TokenizeRequest("r", "m", messages=MESSAGES, add_generation_prompt=generation_prompt)
    result = run(adapter.tokenize(request))
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=generation_prompt)
    assert result.tokens == tok(text, add_special_tokens=False).input_ids


def test_continue_final_message_ends_after_its_content(adapter, hf):
    tok, _ = hf
    messages = [*MESSAGES, {"role": "assistant", "content": "It is"}]
    request = TokenizeRequest("r", "m", messages=messages, add_generation_prompt=False, continue_final_message=True)
    result = run(adapter.tokenize(request))
    text = tok.apply_chat_template(messages, tokenize=False, continue_final_message=True)
    assert result.tokens == tok(text, add_special_tokens=False).input_ids


def test_detokenize_keeps_special_tokens(adapter, hf):
    tok, _ = hf
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False).input_ids
    result = run(adapter.detokenize(DetokenizeRequest("r", "m", tokens=ids)))
    assert "<|im_start|>" in result.prompt
    assert result.prompt == tok.decode(ids, skip_special_tokens=False)
    with pytest.raises(GatewayError) as outside:
        run(adapter.detokenize(DetokenizeRequest("r", "m", tokens=[1, 10_000])))
    assert (outside.value.status, outside.value.param) == (400, "tokens")


def test_embeddings_are_the_normalized_last_token_state(adapter, hf):
    tok, model = hf
    texts = ["Paris", "The weather in Paris is mild in spring and the sea is calm."]
    result = run(adapter.embed(EmbeddingRequest("r", "m", inputs=[*texts, [5, 6, 7]])))
    prompts = [tok(t, add_special_tokens=True).input_ids for t in texts] + [[5, 6, 7]]
    assert result.prompt_tokens == sum(len(p) for p in prompts)
    for prompt, vector in zip(prompts, result.vectors):
        with torch.no_grad():
            state = model.model(torch.tensor([prompt])).last_hidden_state[0, -1]
        assert torch.allclose(torch.tensor(vector), F.normalize(state, dim=-1), atol=1e-4)


def test_embedding_refusals_are_400s_naming_the_field(adapter):
    with pytest.raises(GatewayError) as dims:
        run(adapter.embed(EmbeddingRequest("r", "m", inputs=["hi"], dimensions=8)))
    assert (dims.value.status, dims.value.param) == (400, "dimensions")
    with pytest.raises(GatewayError) as long:
        run(adapter.embed(EmbeddingRequest("r", "m", inputs=[[5] * (MAX_MODEL_LEN + 1)])))
    assert (long.value.status, long.value.param, long.value.code) == (400, "input", "context_length_exceeded")
