"""engine/pooling.py without a model: each refusal of `check_inputs` with its wording, field
and code, at, below and above its boundaries; the batching by token budget; the pooling's
Matryoshka cut and L2 norm."""

from __future__ import annotations

import math

import pytest
import torch

from engine.config import ModelConfig
from engine.pooling import PoolingInputError, batches, check_inputs, next_batch, pool

VOCAB = 10
HIDDEN = 8
MAX_LEN = 4


def _model(matryoshka: bool | list[int] = False) -> ModelConfig:
    model = ModelConfig(
        model_type="llama",
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=4,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        rope_scaling=None,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        hidden_act="silu",
    )
    model.with_matryoshka(matryoshka)
    return model


def _refusal(prompts, dimensions=None, matryoshka: bool | list[int] = False) -> PoolingInputError:
    with pytest.raises(PoolingInputError) as err:
        check_inputs(_model(matryoshka), MAX_LEN, prompts, dimensions)
    return err.value


# ---- check_inputs --------------------------------------------------------------------------


def test_inputs_within_every_limit_pass():
    check_inputs(_model(), MAX_LEN, [[0], [VOCAB - 1, 0, 0, 0]], None)
    check_inputs(_model(True), MAX_LEN, [[1]], 1)
    check_inputs(_model(True), MAX_LEN, [[1]], HIDDEN)
    check_inputs(_model([2, 4]), MAX_LEN, [[1]], 4)


def test_nothing_to_embed_is_refused():
    err = _refusal([])
    assert (str(err), err.param, err.code) == ("there is nothing to embed", "input", None)


def test_an_empty_input_is_refused_naming_it():
    err = _refusal([[1], []])
    assert (str(err), err.param, err.code) == ("input 1 is empty", "input", None)


@pytest.mark.parametrize("ids", [[-1], [0, VOCAB], [VOCAB + 3, 1]], ids=["negative", "at-vocab", "above"])
def test_token_ids_outside_the_vocabulary_are_refused(ids):
    err = _refusal([[0], ids])
    assert (str(err), err.param, err.code) == (
        f"input 1 has token ids outside the vocabulary [0, {VOCAB})",
        "input",
        None,
    )


def test_an_input_longer_than_the_context_is_refused_with_its_code():
    err = _refusal([[1] * MAX_LEN, [1] * (MAX_LEN + 1)])
    assert str(err) == (
        f"This model's maximum context length is {MAX_LEN} tokens. However, you requested {MAX_LEN + 1} tokens in "
        "the input for embedding generation. Please reduce the length of the input."
    )
    assert (err.param, err.code) == ("input", "context_length_exceeded")


def test_dimensions_on_a_model_not_trained_for_them_are_refused_saying_how_to_allow_it():
    err = _refusal([[1]], dimensions=4)
    assert str(err) == (
        "This model does not support matryoshka representation, changing output dimensions will lead to "
        "poor results. (A model trained for it says so in its config.json, `matryoshka_dimensions` or "
        "`is_matryoshka`, or in its backend's `options: {matryoshka: true}`.)"
    )
    assert (err.param, err.code) == ("dimensions", None)


def test_dimensions_not_among_the_models_sizes_are_refused():
    err = _refusal([[1]], dimensions=3, matryoshka=[2, 4])
    assert str(err) == (
        "This model only supports [2, 4] matryoshka dimensions, using other output dimensions will lead "
        "to poor results."
    )
    assert (err.param, err.code) == ("dimensions", None)


@pytest.mark.parametrize("dimensions", [0, -1, HIDDEN + 1])
def test_dimensions_outside_one_to_the_hidden_size_are_refused(dimensions):
    err = _refusal([[1]], dimensions=dimensions, matryoshka=True)
    assert (str(err), err.param, err.code) == (f"dimensions must be between 1 and {HIDDEN}", "dimensions", None)


def test_a_listed_size_above_the_hidden_size_is_still_refused():
    err = _refusal([[1]], dimensions=HIDDEN + 8, matryoshka=[HIDDEN + 8])
    assert str(err) == f"dimensions must be between 1 and {HIDDEN}"


def test_inputs_are_checked_before_dimensions():
    assert _refusal([[]], dimensions=3).param == "input"


def test_pooling_input_error_is_a_value_error():
    assert issubclass(PoolingInputError, ValueError)


# ---- batches ---------------------------------------------------------------------------------


def test_a_batch_holds_the_budget_exactly_and_not_a_token_more():
    prompts = [[1] * 3, [1] * 5, [1] * 4, [1] * 5]
    assert [[len(p) for p in b] for b in batches(prompts, 8)] == [[3, 5], [4], [5]]
    assert [[len(p) for p in b] for b in batches(prompts, 9)] == [[3, 5], [4, 5]]
    assert [[len(p) for p in b] for b in batches(prompts, 7)] == [[3], [5], [4], [5]]


def test_a_prompt_over_the_budget_runs_alone():
    assert [[len(p) for p in b] for b in batches([[1] * 9, [1], [1] * 9], 4)] == [[9], [1], [9]]


def test_next_batch_starts_where_it_is_told():
    prompts = [[1] * 2, [1] * 2, [1] * 2, [1] * 2]
    assert next_batch(prompts, 1, 4) == 3
    assert next_batch(prompts, 3, 4) == 4
    assert next_batch(prompts, 0, 1) == 1


def test_no_prompts_make_no_batches():
    assert batches([], 8) == []


# ---- pool ---------------------------------------------------------------------------------------


def test_pool_normalizes_each_row_in_fp32():
    states = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]], dtype=torch.float16)
    out = pool(states, None)
    assert out == [[0.6000000238418579, 0.800000011920929, 0.0], [0.0, 0.0, 1.0]]


def test_pool_cuts_to_the_dimensions_before_normalizing():
    states = torch.tensor([[3.0, 4.0, 12.0]])
    out = pool(states, 2)
    assert out == [[pytest.approx(0.6), pytest.approx(0.8)]]
    assert math.isclose(sum(v * v for v in pool(states, 3)[0]), 1.0, rel_tol=1e-6)
