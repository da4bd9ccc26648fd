"""Reading config.json / generation_config.json in both transformers 4 and 5 styles."""

from __future__ import annotations

import json

import pytest

from engine.config import ModelConfig

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
