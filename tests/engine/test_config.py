"""Reading config.json / generation_config.json in both transformers 4 and 5 styles."""

from __future__ import annotations

import json

import pytest

from engine.config import EngineConfig, ModelConfig

BASE = {
    "model_type": "llama",
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}


def _write(tmp_path, config, generation=None):
    (tmp_path / "config.json").write_text(json.dumps(config))
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return ModelConfig.from_dir(str(tmp_path))


def test_defaults_and_eos_from_both_files(tmp_path):
    cfg = _write(tmp_path, dict(BASE, eos_token_id=2), {"eos_token_id": [2, 7]})
    assert cfg.head_dim == 16 and cfg.num_key_value_heads == 4
    assert cfg.eos_token_ids == {2, 7}
    assert cfg.rope_theta == 10000.0 and cfg.rope_scaling is None


def test_v4_rope_keys(tmp_path):
    cfg = _write(tmp_path, dict(BASE, rope_theta=500000.0, rope_scaling={"type": "linear", "factor": 4.0}))
    assert cfg.rope_theta == 500000.0
    assert cfg.rope_scaling == {"type": "linear", "factor": 4.0, "rope_type": "linear"}


def test_v5_rope_parameters(tmp_path):
    cfg = _write(tmp_path, dict(BASE, rope_parameters={"rope_theta": 1234.0, "rope_type": "default"}))
    assert cfg.rope_theta == 1234.0 and cfg.rope_scaling is None


def test_unsupported_values_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="rope"):
        _write(tmp_path, dict(BASE, rope_scaling={"rope_type": "yarn", "factor": 2.0}))
    with pytest.raises(ValueError, match="model_type"):
        _write(tmp_path, dict(BASE, model_type="gpt2"))


def test_sliding_window_is_reported(tmp_path):
    assert _write(tmp_path, dict(BASE, model_type="mistral", sliding_window=64)).sliding_window == 64
    assert _write(tmp_path, dict(BASE, model_type="qwen2", sliding_window=64)).sliding_window is None


# ---- each field, its default and each refusal (what a mutation run left open) ------------


def test_every_field_read_and_its_default(tmp_path):
    cfg = _write(tmp_path, {k: v for k, v in BASE.items() if k != "model_type"})
    assert cfg.model_type == "llama"
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size) == (100, 64, 128)
    assert (cfg.num_hidden_layers, cfg.num_attention_heads) == (2, 4)
    assert cfg.rms_norm_eps == 1e-6
    assert cfg.max_position_embeddings == 2048
    assert cfg.tie_word_embeddings is False
    assert cfg.hidden_act == "silu"
    assert cfg.eos_token_ids == set() and cfg.bos_token_id is None
    assert cfg.sliding_window is None
    assert cfg.is_matryoshka is False and cfg.matryoshka_dimensions is None


def test_every_field_as_given(tmp_path):
    given = dict(
        BASE,
        model_type="qwen2",
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-5,
        max_position_embeddings=512,
        tie_word_embeddings=1,
        hidden_act="gelu",
        eos_token_id=5,
        bos_token_id=1,
        use_sliding_window=True,
        sliding_window=32,
    )
    cfg = _write(tmp_path, given)
    assert (cfg.model_type, cfg.num_key_value_heads, cfg.head_dim) == ("qwen2", 2, 8)
    assert (cfg.rms_norm_eps, cfg.max_position_embeddings, cfg.hidden_act) == (1e-5, 512, "gelu")
    assert cfg.tie_word_embeddings is True
    assert (cfg.eos_token_ids, cfg.bos_token_id, cfg.sliding_window) == ({5}, 1, 32)


def test_null_kv_heads_and_head_dim_fall_back(tmp_path):
    cfg = _write(tmp_path, dict(BASE, num_key_value_heads=None, head_dim=None, hidden_size=96, num_attention_heads=3))
    assert (cfg.num_key_value_heads, cfg.head_dim) == (3, 32)
    assert isinstance(cfg.head_dim, int)  # a tensor dimension


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral"])
def test_each_supported_model_type_is_read(tmp_path, model_type):
    assert _write(tmp_path, dict(BASE, model_type=model_type)).model_type == model_type


def test_an_unsupported_model_type_is_refused_listing_the_supported(tmp_path):
    with pytest.raises(ValueError) as err:
        _write(tmp_path, dict(BASE, model_type="gpt2"))
    assert str(err.value) == "unsupported model_type 'gpt2'; supported: ['llama', 'mistral', 'qwen2']"


def test_rope_parameters_other_than_theta_are_the_scaling(tmp_path):
    cfg = _write(tmp_path, dict(BASE, rope_parameters={"rope_theta": 99.0, "rope_type": "llama3", "factor": 8.0}))
    assert cfg.rope_theta == 99.0
    assert cfg.rope_scaling == {"rope_type": "llama3", "factor": 8.0}


def test_rope_parameters_without_theta_take_the_top_level_one(tmp_path):
    cfg = _write(tmp_path, dict(BASE, rope_theta=77, rope_parameters={"type": "linear", "factor": 2.0}))
    assert cfg.rope_theta == 77.0 and isinstance(cfg.rope_theta, float)
    assert cfg.rope_scaling == {"type": "linear", "factor": 2.0, "rope_type": "linear"}


def test_rope_scaling_wins_over_rope_parameters(tmp_path):
    config = dict(BASE, rope_scaling={"rope_type": "linear", "factor": 3.0}, rope_parameters={"rope_type": "llama3"})
    assert _write(tmp_path, config).rope_scaling == {"rope_type": "linear", "factor": 3.0}


@pytest.mark.parametrize("scaling", [{"factor": 2.0}, {"type": "default"}, {"rope_type": "default", "type": "linear"}])
def test_a_default_rope_is_no_scaling(tmp_path, scaling):
    assert _write(tmp_path, dict(BASE, rope_scaling=scaling)).rope_scaling is None


def test_an_unsupported_rope_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError) as err:
        _write(tmp_path, dict(BASE, rope_scaling={"type": "yarn"}))
    assert str(err.value) == "unsupported rope scaling type 'yarn' (supported: default, linear, llama3)"


@pytest.mark.parametrize(
    ("config_eos", "generation_eos", "expected"),
    [
        (None, None, set()),
        (3, None, {3}),
        ([3, 4], None, {3, 4}),
        (None, 9, {9}),
        (3, [3, 9], {3, 9}),
        (["5"], None, {5}),
    ],
)
def test_eos_ids_from_either_file(tmp_path, config_eos, generation_eos, expected):
    config = dict(BASE) if config_eos is None else dict(BASE, eos_token_id=config_eos)
    cfg = _write(tmp_path, config, {} if generation_eos is None else {"eos_token_id": generation_eos})
    assert cfg.eos_token_ids == expected


def test_a_sliding_window_is_only_read_for_mistral_or_when_used(tmp_path):
    assert _write(tmp_path, dict(BASE, sliding_window=64)).sliding_window is None
    assert _write(tmp_path, dict(BASE, sliding_window=64, use_sliding_window=True)).sliding_window == 64
    assert _write(tmp_path, dict(BASE, sliding_window=64, use_sliding_window=False)).sliding_window is None


@pytest.mark.parametrize(
    ("keys", "flag", "sizes"),
    [
        ({"matryoshka_dimensions": [16, "32"]}, True, [16, 32]),
        ({"matryoshka_dimensions": []}, False, None),
        ({"is_matryoshka": True}, True, None),
        ({"is_matryoshka": False, "matryoshka_dimensions": None}, False, None),
    ],
)
def test_matryoshka_from_the_config(tmp_path, keys, flag, sizes):
    cfg = _write(tmp_path, dict(BASE, **keys))
    assert (cfg.is_matryoshka, cfg.matryoshka_dimensions) == (flag, sizes)


def test_with_matryoshka_sets_the_flag_or_the_sizes(tmp_path):
    cfg = _write(tmp_path, dict(BASE, matryoshka_dimensions=[8]))
    cfg.with_matryoshka(False)
    assert (cfg.is_matryoshka, cfg.matryoshka_dimensions) == (False, None)
    cfg.with_matryoshka(True)
    assert (cfg.is_matryoshka, cfg.matryoshka_dimensions) == (True, None)
    sizes = [1, 4]
    cfg.with_matryoshka(sizes)
    assert (cfg.is_matryoshka, cfg.matryoshka_dimensions) == (True, [1, 4])
    sizes.append(9)
    assert cfg.matryoshka_dimensions == [1, 4]


@pytest.mark.parametrize("bad", [[], [0], [4, -1], [True], ["4"], [2.0]])
def test_with_matryoshka_refuses_anything_but_positive_sizes(tmp_path, bad):
    cfg = _write(tmp_path, BASE)
    with pytest.raises(ValueError) as err:
        cfg.with_matryoshka(bad)
    assert str(err.value) == f"matryoshka must be true, false or a list of positive sizes, not {bad!r}"
    assert (cfg.is_matryoshka, cfg.matryoshka_dimensions) == (False, None)


# ---- EngineConfig ------------------------------------------------------------------------------


def test_engine_config_defaults():
    cfg = EngineConfig("m")
    assert (cfg.model_dir, cfg.dtype, cfg.device, cfg.block_size) == ("m", "float32", "cpu", 16)
    assert (cfg.kv_cache_bytes, cfg.num_blocks, cfg.max_model_len) == (None, None, None)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (64, 2048)
    assert cfg.enable_prefix_caching is True and cfg.seed == 0


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("block_size", "block_size must be >= 1"),
        ("max_num_seqs", "max_num_seqs and max_num_batched_tokens must be >= 1"),
        ("max_num_batched_tokens", "max_num_seqs and max_num_batched_tokens must be >= 1"),
    ],
)
def test_engine_limits_at_below_and_above_one(field, message):
    EngineConfig("m", **{field: 1}).validate()
    EngineConfig("m", **{field: 2}).validate()
    for value in (0, -1):
        with pytest.raises(ValueError) as err:
            EngineConfig("m", **{field: value}).validate()
        assert str(err.value) == message
