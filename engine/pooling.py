"""Embeddings from the decoder: the pooling vLLM applies to a decoder-only model run for
embedding (`--runner pooling`, `--convert embed`).

vLLM's defaults for such a model: pooling type LAST (the hidden state of the prompt's last
token, after the model's final norm; `get_default_pooling_type` in
`model_executor/models/interfaces_base.py`), then the Matryoshka cut to `dimensions` when
the model declares it supports one, then L2 normalization (`normalize` defaults to true for
the embed task, `pooling_params.py`). This module does exactly that, in fp32.

The pass is a prefill only: KV tensors of its own for the batch (the paged cache and the
sequences in it are untouched), no sampling, nothing kept afterwards. Prompts are batched
up to the engine's token budget per forward pass; a longer prompt runs alone. While
generation shares the engine, engine/async_engine.py makes the passes smaller and spaces
them out (see `AsyncEngine.embed`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.config import ModelConfig


class PoolingInputError(ValueError):
    """An input the engine cannot embed: a 400 naming `param` (`input` or `dimensions`);
    `code` is "context_length_exceeded" for an input longer than the model's context."""

    def __init__(self, message: str, param: str, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def check_inputs(model: ModelConfig, max_model_len: int, prompts: list[list[int]], dimensions: int | None) -> None:
    """Raise PoolingInputError for anything `embed` could not honour, before any work."""
    if not prompts:
        raise PoolingInputError("there is nothing to embed", "input")
    vocab = model.vocab_size
    for i, ids in enumerate(prompts):
        if not ids:
            raise PoolingInputError(f"input {i} is empty", "input")
        if min(ids) < 0 or max(ids) >= vocab:
            raise PoolingInputError(f"input {i} has token ids outside the vocabulary [0, {vocab})", "input")
        if len(ids) > max_model_len:
            raise PoolingInputError(
                f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                f"{len(ids)} tokens in the input for embedding generation. Please reduce the length of the input.",
                "input",
                "context_length_exceeded",
            )
    if dimensions is None:
        return
    if not model.is_matryoshka:
        raise PoolingInputError(
            "This model does not support matryoshka representation, changing output dimensions will lead to "
            "poor results. (A model trained for it says so in its config.json, `matryoshka_dimensions` or "
            "`is_matryoshka`, or in its backend's `options: {matryoshka: true}`.)",
            "dimensions",
        )
    allowed = model.matryoshka_dimensions
    if allowed and dimensions not in allowed:
        raise PoolingInputError(
            f"This model only supports {allowed} matryoshka dimensions, using other output dimensions will lead "
            "to poor results.",
            "dimensions",
        )
    if not 1 <= dimensions <= model.hidden_size:
        raise PoolingInputError(f"dimensions must be between 1 and {model.hidden_size}", "dimensions")


def batches(prompts: list[list[int]], token_budget: int) -> list[list[list[int]]]:
    """Consecutive prompts grouped so each forward pass holds at most `token_budget` tokens
    (a prompt longer than that alone), in order."""
    out: list[list[list[int]]] = []
    start = 0
    while start < len(prompts):
        end = next_batch(prompts, start, token_budget)
        out.append(prompts[start:end])
        start = end
    return out


def next_batch(prompts: list[list[int]], start: int, token_budget: int) -> int:
    """The end of the forward pass that begins at `prompts[start]`: as many prompts as fit
    `token_budget` tokens, and at least one."""
    end, size = start, 0
    while end < len(prompts) and (end == start or size + len(prompts[end]) <= token_budget):
        size += len(prompts[end])
        end += 1
    return end


def pool(states: torch.Tensor, dimensions: int | None) -> list[list[float]]:
    """Last-token states [B, hidden] -> the embeddings: Matryoshka cut, then L2 norm
    (F.normalize's defaults: p=2 over dim 1, each row)."""
    if dimensions is not None:
        states = states[:, :dimensions]
    return F.normalize(states.float()).tolist()
