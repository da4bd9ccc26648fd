"""Tiny random Hugging Face checkpoints for the engine tests (built once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.make_tiny import make_tiny
from engine.text.tokenizer import TextTokenizer
from tests.native_adapters import started_native


def build_tiny_model(
    path,
    kind: str = "llama",
    *,
    vocab_size: int = 384,
    hidden_size: int = 64,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    head_dim: int = 32,
    layers: int = 2,
    tie: bool = False,
    rope_parameters: dict | None = None,
    seed: int = 0,
    max_position_embeddings: int = 512,
    eos_token_id=2,
):
    """Save a random-weight model with transformers and return it (fp32, eval mode).

    initializer_range is raised above the default so logits are spread out: greedy ties
    (and near-ties that rounding could flip) would make token-for-token comparison flaky."""
    from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}[kind]
    kwargs = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie,
        initializer_range=0.2,
        eos_token_id=eos_token_id,
        bos_token_id=1,
    )
    if rope_parameters is not None:
        kwargs["rope_parameters"] = rope_parameters
    config = cls(**kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if kind == "qwen2":
        # Random init leaves biases at zero; make them matter.
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    model.eval()
    model.save_pretrained(str(path), safe_serialization=True)
    return model


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    model = build_tiny_model(path, "llama")
    return str(path), model


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen2")
    model = build_tiny_model(path, "qwen2", num_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64, tie=True, seed=1)
    return str(path), model


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy decoding of one prompt, EOS disabled."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(prompt) :].tolist()


def run_to_completion(engine, check_every_step: bool = True) -> dict[str, dict[int, list]]:
    """Step until idle; returns request id -> choice index -> list of TokenOutputs."""
    outputs: dict[str, dict[int, list]] = {}
    steps = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            outputs.setdefault(out.request_id, {}).setdefault(out.index, []).append(out)
        if check_every_step:
            engine.check_integrity()
        steps += 1
        assert steps < 100_000, "engine made no progress"
    return outputs


def tokens_of(outs: list) -> list[int]:
    return [t for o in outs for t in o.token_ids]


def random_prompts(lengths, vocab_size: int, seed: int = 0, low: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(low, vocab_size, (n,), generator=g).tolist() for n in lengths]


# ---- the structured-output tests' tiny model and adapter (one per test module) ----


@pytest.fixture(scope="module")
def structured_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("structured") / "tiny")


@pytest.fixture(scope="module")
def structured_adapter(structured_dir: Path):
    # 50 sequences of a tiny model at once.
    yield from started_native(structured_dir, one_thread=True, max_num_seqs=64, num_blocks=1024, max_model_len=1024)


@pytest.fixture(scope="module")
def structured_tok(structured_dir: Path) -> TextTokenizer:
    return TextTokenizer(structured_dir)
