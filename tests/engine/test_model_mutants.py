"""engine/model.py (and the runner's batching that feeds it) against transformers, logit for logit,
on models small enough to build once per module: every row the engine samples from is compared
with transformers' logits at that position, through prefills, chunked prefills, decodes in several
context groups and prefills in several length groups. Greedy token comparisons
(test_engine_greedy.py) hide a logit that is off by less than the top two's gap; these do not."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.config import ModelConfig
from engine.llm_engine import LLMEngine
from engine.model import LlamaModel, apply_rope, rms_norm, rope_inv_freq, rope_tables
from engine.sampling_params import SamplingParams
from engine.weights import load_state_dict
from tests.engine.conftest import build_tiny_model, random_prompts

VOCAB = 64
SMALL = dict(vocab_size=VOCAB, hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=8, layers=2)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 4.0,
    "high_freq_factor": 16.0,
    # head_dim 8, theta 500000: wavelengths 6.3 (kept), 167 (between 2048 / 16 and 2048 / 4: interpolated),
    # 4443 and 118000 (divided; 4443 is below 2048 * 4, so a bound multiplied instead of divided shows)
    "original_max_position_embeddings": 2048,
    "rope_theta": 500000.0,
}


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[str, torch.nn.Module]:
    path = tmp_path_factory.mktemp("model_llama")
    return str(path), build_tiny_model(path, "llama", seed=11, **SMALL)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory) -> tuple[str, torch.nn.Module]:
    """q, k and v biases, grouped KV heads, tied embeddings."""
    path = tmp_path_factory.mktemp("model_qwen2")
    return str(path), build_tiny_model(path, "qwen2", seed=12, tie=True, **SMALL)


def run_and_compare(
    path: str, hf, prompts: list[list[int]], max_tokens: int = 3, late: int = 0, groups: list | None = None, **engine_kw
) -> LLMEngine:
    """Run `prompts` greedily (the last `late` of them added after the first step); every logits
    row the engine sampled from must equal transformers' logits at that position."""
    engine = LLMEngine(path, **engine_kw)
    rows: dict[str, list[torch.Tensor]] = {}
    execute = engine.runner.execute

    def spy(scheduled):
        out = execute(scheduled)
        assert out.logits.dtype == torch.float32 and out.logits.shape == (len(out.sampled), VOCAB)
        for seq, row in zip(out.sampled, out.logits):
            rows.setdefault(seq.request_id, []).append(row.clone())
        return out

    engine.runner.execute = spy
    metadata = engine.runner._metadata

    def count_groups(parts):
        if groups is not None:
            groups.append(len(parts))
        return metadata(parts)

    engine.runner._metadata = count_groups
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts[: len(prompts) - late]):
        engine.add_request(f"r{i}", p, params)
    generated: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        if late and generated:
            for i in range(len(prompts) - late, len(prompts)):
                engine.add_request(f"r{i}", prompts[i], params)
            late = 0
        for out in engine.step():
            generated.setdefault(out.request_id, []).extend(out.token_ids)
    for i, p in enumerate(prompts):
        full = p + generated[f"r{i}"]
        with torch.no_grad():
            want = hf(torch.tensor([full])).logits[0, len(p) - 1 : len(full) - 1]
        got = torch.stack(rows[f"r{i}"])
        assert got.shape == want.shape, f"prompt {i}"
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), f"prompt {i}: {(got - want).abs().max()}"
    return engine


def test_prefills_and_decodes_of_mixed_lengths(llama):
    # a one-token prompt is a decode-shaped chunk: the first step attends in two groups
    run_and_compare(*llama, random_prompts([1, 5, 9, 17, 3], VOCAB, seed=1), block_size=4)


def test_decodes_in_several_context_groups(llama):
    """Nine decodes, six with one block of context and three with sixteen: two decode groups; a
    prefill arriving after the first step makes a third group beside them."""
    prompts = random_prompts([2, 3, 2, 3, 60, 62, 2, 3, 61, 7], VOCAB, seed=2)
    groups: list[int] = []
    run_and_compare(*llama, prompts, max_tokens=4, late=1, groups=groups, block_size=4)
    assert max(groups) == 3


def test_a_large_norm_epsilon(llama, tmp_path):
    """rms_norm_eps is read from config.json into every norm (at transformers' 1e-6 a lost epsilon
    would not show)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    path, hf = llama
    shutil.copytree(path, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | {"rms_norm_eps": 0.5}))
    wide = copy.deepcopy(hf)
    norms = [m for m in wide.modules() if isinstance(m, LlamaRMSNorm)]
    assert len(norms) == 2 * SMALL["layers"] + 1
    for norm in norms:
        norm.variance_epsilon = 0.5
    engine = run_and_compare(str(tmp_path / "m"), wide, random_prompts([5, 1], VOCAB, seed=10), block_size=4)
    prompts = random_prompts([1, 6], VOCAB, seed=11)
    with torch.no_grad():
        want = torch.stack([wide.model(torch.tensor([p])).last_hidden_state[0, -1] for p in prompts])
    assert torch.allclose(engine.runner.last_token_states(prompts), want, atol=1e-5, rtol=1e-5)


def test_prefills_in_several_length_groups_and_chunks(llama):
    groups: list[int] = []
    run_and_compare(*llama, random_prompts([3, 100, 4, 90], VOCAB, seed=3), groups=groups, block_size=8)
    assert groups[0] == 2
    # chunks of 8 tokens: each later chunk attends over the context written by the ones before
    run_and_compare(*llama, random_prompts([20, 13, 6], VOCAB, seed=4), block_size=4, max_num_batched_tokens=8)


def test_biases_grouped_heads_and_tied_embeddings(qwen2):
    run_and_compare(*qwen2, random_prompts([1, 7, 30, 12], VOCAB, seed=5), block_size=8)


def test_a_missing_bias_counts_as_zero(qwen2, tmp_path):
    """A checkpoint with q and v biases but none for k: k's slice of the fused bias is zeros."""
    path, hf = qwen2
    shutil.copytree(path, tmp_path / "m")
    state = load_file(str(tmp_path / "m" / "model.safetensors"))
    for i in range(SMALL["layers"]):
        del state[f"model.layers.{i}.self_attn.k_proj.bias"]
    save_file(state, str(tmp_path / "m" / "model.safetensors"), metadata={"format": "pt"})
    zeroed = copy.deepcopy(hf)
    with torch.no_grad():
        for layer in zeroed.model.layers:
            layer.self_attn.k_proj.bias.zero_()
    run_and_compare(str(tmp_path / "m"), zeroed, random_prompts([9, 4], VOCAB, seed=6), block_size=8)


def test_a_bias_on_the_output_projection(tmp_path):
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        attention_bias=True,
        initializer_range=0.2,
        hidden_act="silu",
    )
    torch.manual_seed(13)
    hf = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.5)
    hf.save_pretrained(str(tmp_path), safe_serialization=True)
    assert "model.layers.0.self_attn.o_proj.bias" in load_file(str(tmp_path / "model.safetensors"))
    run_and_compare(str(tmp_path), hf, random_prompts([1, 11, 6], VOCAB, seed=7), block_size=4)


@pytest.mark.parametrize("rope", [{"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0}, LLAMA3])
def test_scaled_rope(tmp_path, rope):
    hf = build_tiny_model(tmp_path, "llama", rope_parameters=rope, seed=14, **SMALL)
    inv_freq = rope_inv_freq(ModelConfig.from_dir(str(tmp_path)))
    assert inv_freq.dtype == torch.float32
    assert torch.allclose(inv_freq, hf.model.rotary_emb.inv_freq, rtol=1e-6, atol=0)
    run_and_compare(str(tmp_path), hf, random_prompts([40, 3], VOCAB, seed=8), block_size=8)


def test_llama3_rope_keeps_high_divides_low_and_interpolates_between(tmp_path):
    build_tiny_model(tmp_path, "llama", rope_parameters=LLAMA3, **SMALL)
    cfg = ModelConfig.from_dir(str(tmp_path))
    plain = 1.0 / (500000.0 ** (torch.arange(0, 8, 2).float() / 8))
    got = rope_inv_freq(cfg)
    assert got[0] == plain[0]  # wavelength 6.3 < 2048 / 16: kept
    assert torch.allclose(got[2:], plain[2:] / 8.0)  # wavelengths above 2048 / 4: divided by the factor
    smooth = (2048 / (2 * torch.pi / plain[1]) - 4.0) / (16.0 - 4.0)
    assert 0 < smooth < 1
    assert torch.allclose(got[1], (1 - smooth) * plain[1] / 8.0 + smooth * plain[1])


def _rope_config(scaling: dict | None, head_dim: int = 8) -> ModelConfig:
    return ModelConfig(
        model_type="llama",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=32 // head_dim,
        num_key_value_heads=1,
        head_dim=head_dim,
        rms_norm_eps=1e-6,
        rope_theta=500000.0,
        rope_scaling=scaling,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        hidden_act="silu",
    )


@pytest.mark.parametrize("low_ff", [1.0, 2.0])
def test_llama3_rope_is_continuous_at_the_low_wavelength(low_ff):
    """The first frequency is exactly 1 (wavelength 2 pi): with the low bound at that wavelength it
    is interpolated with weight 0, which is the divided value (a wavelength above the bound is divided)."""
    scaling = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": low_ff, "high_freq_factor": 16.0}
    scaling["original_max_position_embeddings"] = float(torch.tensor(2 * torch.pi, dtype=torch.float32)) * low_ff
    got = rope_inv_freq(_rope_config(scaling))
    assert got[0] == 1.0 / 4.0
    assert torch.allclose(got[1:], 1.0 / (500000.0 ** (torch.arange(2, 8, 2).float() / 8)) / 4.0)


def test_rope_tables_cos_and_sign_folded_sin_in_the_model_dtype(llama):
    from transformers.models.llama.modeling_llama import rotate_half

    cfg = ModelConfig.from_dir(llama[0])
    hf_rope = llama[1].model.rotary_emb
    x = torch.randn(1, 12, 8)
    with torch.no_grad():
        hf_cos, hf_sin = hf_rope(x, torch.arange(12)[None, :])
    for dtype in (torch.float32, torch.bfloat16):
        cos, signed_sin = rope_tables(cfg, 12, dtype, torch.device("cpu"))
        assert cos.dtype == signed_sin.dtype == dtype and cos.shape == signed_sin.shape == (12, 8)
        assert torch.equal(cos, hf_cos[0].to(dtype))
        assert torch.equal(signed_sin, torch.cat((-hf_sin[0, :, :4], hf_sin[0, :, 4:]), -1).to(dtype))
    cos, signed_sin = rope_tables(cfg, 12, torch.float32, torch.device("cpu"))
    want = x[0] * hf_cos[0] + rotate_half(x[0]) * hf_sin[0]
    assert torch.allclose(apply_rope(x[0], cos, signed_sin), want, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_as_transformers_computes_it(dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 32, generator=g) * 3).to(dtype)
    norm = LlamaRMSNorm(32, eps=1e-3)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(32, generator=g) + 0.5)
        want = norm.to(dtype)(x)
    got = rms_norm(x, norm.weight.detach(), 1e-3)
    assert got.dtype == dtype
    assert torch.allclose(got.float(), want.float(), atol=1e-6 if dtype == torch.float32 else 0, rtol=1e-5)


def _weights(path: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    return ModelConfig.from_dir(path), load_state_dict(path)


def test_the_output_head(llama):
    cfg, state = _weights(llama[0])
    embed, head = state["model.embed_tokens.weight"], state["lm_head.weight"]

    def lm_head() -> torch.Tensor:
        return LlamaModel(cfg, state, torch.float32, torch.device("cpu"), 4).lm_head

    assert torch.equal(lm_head(), head) and not torch.equal(head, embed)
    cfg.tie_word_embeddings = True  # tied: the embeddings, even with an lm_head in the file
    assert torch.equal(lm_head(), embed)
    cfg.tie_word_embeddings = False  # untied but no lm_head in the file: the embeddings too
    del state["lm_head.weight"]
    assert torch.equal(lm_head(), embed)


def test_the_weights_take_the_dtype_and_the_activation_is_checked(llama, qwen2):
    cfg, state = _weights(llama[0])
    model = LlamaModel(cfg, state, torch.bfloat16, torch.device("cpu"), 4)
    assert {t.dtype for t in (model.embed, model.norm, model.lm_head, *vars_of(model.layers[0]))} == {torch.bfloat16}
    assert model.layers[0].qkv.shape == (32 + 16 + 16, 32) and model.layers[0].gate_up.shape == (128, 32)
    assert model.layers[0].qkv_bias is None and model.layers[0].o_bias is None and len(model.layers) == 2
    qwen_cfg, qwen_state = _weights(qwen2[0])
    del qwen_state["model.layers.0.self_attn.k_proj.bias"]
    biased = LlamaModel(qwen_cfg, qwen_state, torch.bfloat16, torch.device("cpu"), 4).layers[0].qkv_bias
    assert biased is not None and biased.dtype == torch.bfloat16 and biased.shape == (64,)
    assert not biased[32:48].any() and biased[:32].all()
    cfg.hidden_act = "swish"
    LlamaModel(cfg, state, torch.float32, torch.device("cpu"), 4)
    cfg.hidden_act = "gelu"
    with pytest.raises(ValueError) as caught:
        LlamaModel(cfg, state, torch.float32, torch.device("cpu"), 4)
    assert str(caught.value) == "unsupported hidden_act 'gelu'"


def vars_of(layer) -> list[torch.Tensor]:
    names = ("input_norm", "qkv", "o", "post_norm", "gate_up", "down")
    return [getattr(layer, n) for n in names]


def test_final_norm_is_transformers_last_hidden_state(llama):
    path, hf = llama
    engine = LLMEngine(path, block_size=4)
    prompts = random_prompts([1, 6, 13], VOCAB, seed=9)
    got = engine.runner.last_token_states(prompts)
    with torch.no_grad():
        want = torch.stack([hf.model(torch.tensor([p])).last_hidden_state[0, -1] for p in prompts])
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
