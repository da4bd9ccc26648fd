"""The documented limits of the calls that generate nothing (embeddings, detokenize) at
their boundaries: the value at the limit is taken, one past it is a 400 naming the
field, so a flipped comparison fails (test_non_generation_requests.py refuses the far
side)."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.embeddings import (
    INPUTS_PER_UNIT,
    MAX_DIMENSIONS,
    MAX_INPUTS,
    MAX_TOTAL_TOKENS,
    TOKEN_ID_MAX,
    parse_embeddings,
)
from gateway.openai.tokenize import TOKEN_ID_MAX as DETOKENIZE_ID_MAX
from gateway.openai.tokenize import parse_detokenize


def embeddings(**fields):
    return parse_embeddings({"model": "m", **fields}, "rid")


def refused(parse, body: dict) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        parse(body, "rid")
    assert info.value.status == 400
    return info.value


def token_arrays(total: int) -> list[list[int]]:
    """Token-id arrays holding `total` ids in all (1,000 to an array)."""
    return [[7] * 1000 for _ in range(total // 1000)] + ([[7] * (total % 1000)] if total % 1000 else [])


@pytest.mark.parametrize("total", [MAX_TOTAL_TOKENS - 1, MAX_TOTAL_TOKENS])
def test_token_ids_up_to_the_total_are_taken(total) -> None:
    call, _ = embeddings(input=token_arrays(total)).payload
    assert sum(len(i) for i in call.inputs) == total


def test_one_token_id_over_the_total_is_refused() -> None:
    err = refused(parse_embeddings, {"model": "m", "input": token_arrays(MAX_TOTAL_TOKENS + 1)})
    assert err.param == "input" and str(MAX_TOTAL_TOKENS) in err.message


@pytest.mark.parametrize(("count", "taken"), [(MAX_INPUTS - 1, True), (MAX_INPUTS, True), (MAX_INPUTS + 1, False)])
def test_at_most_max_inputs_items(count, taken) -> None:
    body = {"model": "m", "input": ["x"] * count}
    if taken:
        assert len(parse_embeddings(body, "rid").payload[0].inputs) == count
    else:
        assert refused(parse_embeddings, body).param == "input"


@pytest.mark.parametrize(
    ("dimensions", "taken"), [(0, False), (1, True), (MAX_DIMENSIONS, True), (MAX_DIMENSIONS + 1, False)]
)
def test_dimensions_from_1_to_the_maximum(dimensions, taken) -> None:
    body = {"model": "m", "input": "x", "dimensions": dimensions}
    if taken:
        assert parse_embeddings(body, "rid").payload[0].dimensions == dimensions
    else:
        assert refused(parse_embeddings, body).param == "dimensions"


@pytest.mark.parametrize(("token", "taken"), [(0, True), (TOKEN_ID_MAX, True), (TOKEN_ID_MAX + 1, False), (-1, False)])
def test_an_embedding_token_id_is_within_0_to_its_maximum(token, taken) -> None:
    body = {"model": "m", "input": [token]}
    if taken:
        assert parse_embeddings(body, "rid").payload[0].inputs == [[token]]
    else:
        assert refused(parse_embeddings, body).param == "input"


@pytest.mark.parametrize(("token", "taken"), [(DETOKENIZE_ID_MAX, True), (DETOKENIZE_ID_MAX + 1, False)])
def test_a_detokenize_token_id_is_within_0_to_its_maximum(token, taken) -> None:
    body = {"model": "m", "tokens": [0, token]}
    if taken:
        assert parse_detokenize(body, "rid").payload.tokens == [0, token]
    else:
        assert refused(parse_detokenize, body).param == "tokens"


@pytest.mark.parametrize(
    ("count", "units"),
    [(1, 1), (INPUTS_PER_UNIT - 1, 1), (INPUTS_PER_UNIT, 1), (INPUTS_PER_UNIT + 1, 2), (2 * INPUTS_PER_UNIT, 2)],
)
def test_a_call_counts_one_concurrency_unit_per_started_block_of_inputs(count, units) -> None:
    assert embeddings(input=["x"] * count).size_units == units
