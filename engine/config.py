"""Model configuration read from a local Hugging Face directory, and engine knobs."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

SUPPORTED_MODEL_TYPES = {"llama", "qwen2", "mistral"}


@dataclass
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    hidden_act: str
    eos_token_ids: set[int] = field(default_factory=set)
    bos_token_id: int | None = None
    # Attention window, when the model uses one. The engine attends to the full context,
    # so it caps max_model_len here rather than silently diverge past the window.
    sliding_window: int | None = None
    # Matryoshka-trained embeddings (the keys vLLM reads from config.json): a request's
    # `dimensions` may shorten the vector only then, and only to a listed size if any are.
    is_matryoshka: bool = False
    matryoshka_dimensions: list[int] | None = None

    def with_matryoshka(self, matryoshka: bool | list[int]) -> None:
        """Whether embeddings may be cut to `dimensions`: true (any size up to the hidden
        size), false, or the sizes the model was trained for."""
        if isinstance(matryoshka, bool):
            self.is_matryoshka, self.matryoshka_dimensions = matryoshka, None
            return
        if not matryoshka or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in matryoshka):
            raise ValueError(f"matryoshka must be true, false or a list of positive sizes, not {matryoshka!r}")
        self.is_matryoshka, self.matryoshka_dimensions = True, list(matryoshka)

    @classmethod
    def from_dir(cls, model_dir: str) -> ModelConfig:
        with open(os.path.join(model_dir, "config.json")) as f:
            raw = json.load(f)
        model_type = raw.get("model_type", "llama")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"unsupported model_type {model_type!r}; supported: {sorted(SUPPORTED_MODEL_TYPES)}")
        heads = raw["num_attention_heads"]
        # transformers >= 5 writes `rope_parameters` (theta inside); older versions write
        # `rope_theta` and `rope_scaling` separately. Accept both.
        rope = dict(raw.get("rope_parameters") or {})
        theta = float(rope.pop("rope_theta", raw.get("rope_theta", 10000.0)))
        scaling = raw.get("rope_scaling") or rope or None
        if scaling is not None:
            scaling = dict(scaling)
            rope_type = scaling.get("rope_type", scaling.get("type", "default"))
            scaling["rope_type"] = rope_type
            if rope_type == "default":
                scaling = None
            elif rope_type not in ("linear", "llama3"):
                raise ValueError(f"unsupported rope scaling type {rope_type!r} (supported: default, linear, llama3)")
        eos: set[int] = set(_as_id_list(raw.get("eos_token_id")))
        gen_path = os.path.join(model_dir, "generation_config.json")
        if os.path.exists(gen_path):
            with open(gen_path) as f:
                eos |= set(_as_id_list(json.load(f).get("eos_token_id")))
        return cls(
            model_type=model_type,
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads") or heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings")),
            hidden_act=raw.get("hidden_act", "silu"),
            eos_token_ids=eos,
            bos_token_id=raw.get("bos_token_id"),
            sliding_window=(
                raw.get("sliding_window") if model_type == "mistral" or raw.get("use_sliding_window") else None
            ),
            is_matryoshka=bool(raw.get("matryoshka_dimensions") or raw.get("is_matryoshka")),
            matryoshka_dimensions=[int(d) for d in raw["matryoshka_dimensions"]]
            if raw.get("matryoshka_dimensions")
            else None,
        )


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


@dataclass
class EngineConfig:
    model_dir: str
    dtype: str = "float32"
    device: str = "cpu"
    block_size: int = 16
    kv_cache_bytes: int | None = None
    num_blocks: int | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    seed: int = 0

    def validate(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size must be >= 1")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
