"""Each documented limit of a Responses request at its boundary: the value at the limit
is taken as sent, one past it is a 400 naming the field (test_request.py refuses the far
side; here the limit itself and its neighbours, so a flipped comparison fails)."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.listing import MAX_LIMIT, parse_list_query
from gateway.openai.responses.request import MAX_SAFETY_IDENTIFIER, MIN_OUTPUT_TOKENS, parse_request
from gateway.openai.responses.request_options import MAX_TOOLS, METADATA_KEY_CHARS, METADATA_PAIRS, METADATA_VALUE_CHARS


def parse(**body):
    return parse_request({"model": "m", "input": "hi", **body})


def tools(count: int) -> list[dict]:
    return [{"type": "function", "name": f"f{i}"} for i in range(count)]


# (field, the value at the limit and below it, the value one past it, the param the refusal names)
BOUNDS = [
    ("tools", tools(MAX_TOOLS), tools(MAX_TOOLS - 1), tools(MAX_TOOLS + 1), "tools"),
    (
        "metadata",
        {f"k{i}": "v" for i in range(METADATA_PAIRS)},
        {f"k{i}": "v" for i in range(METADATA_PAIRS - 1)},
        {f"k{i}": "v" for i in range(METADATA_PAIRS + 1)},
        "metadata",
    ),
    (
        "metadata",
        {"k" * METADATA_KEY_CHARS: "v"},
        {"k" * (METADATA_KEY_CHARS - 1): "v"},
        {"k" * (METADATA_KEY_CHARS + 1): "v"},
        "metadata",
    ),
    (
        "metadata",
        {"k": "v" * METADATA_VALUE_CHARS},
        {"k": "v" * (METADATA_VALUE_CHARS - 1)},
        {"k": "v" * (METADATA_VALUE_CHARS + 1)},
        "metadata.k",
    ),
    (
        "safety_identifier",
        "s" * MAX_SAFETY_IDENTIFIER,
        "s" * (MAX_SAFETY_IDENTIFIER - 1),
        "s" * (MAX_SAFETY_IDENTIFIER + 1),
        "safety_identifier",
    ),
]


@pytest.mark.parametrize(
    ("field", "at", "below", "above", "param"),
    BOUNDS,
    ids=["tools", "metadata-pairs", "metadata-key", "metadata-value", "safety_identifier"],
)
def test_a_field_at_its_limit_is_taken_and_one_past_it_is_refused(field, at, below, above, param) -> None:
    for fine in (at, below):
        taken = getattr(parse(**{field: fine}), field)
        if field == "tools":  # each taken in OpenAI's full shape
            assert [t["name"] for t in taken] == [t["name"] for t in fine]
        else:
            assert taken == fine
    with pytest.raises(GatewayError) as info:
        parse(**{field: above})
    assert (info.value.status, info.value.param) == (400, param)


def test_max_output_tokens_may_be_its_documented_minimum_and_not_one_less() -> None:
    assert parse(max_output_tokens=MIN_OUTPUT_TOKENS).max_output_tokens == MIN_OUTPUT_TOKENS
    assert parse(max_output_tokens=MIN_OUTPUT_TOKENS + 1).max_output_tokens == MIN_OUTPUT_TOKENS + 1
    with pytest.raises(GatewayError) as info:
        parse(max_output_tokens=MIN_OUTPUT_TOKENS - 1)
    assert info.value.param == "max_output_tokens"


@pytest.mark.parametrize(
    ("value", "taken"), [("1", 1), ("2", 2), (str(MAX_LIMIT - 1), MAX_LIMIT - 1), (str(MAX_LIMIT), MAX_LIMIT)]
)
def test_a_listing_limit_from_1_to_its_maximum_is_taken(value, taken) -> None:
    assert parse_list_query([("limit", value)]).limit == taken


@pytest.mark.parametrize("value", ["0", str(MAX_LIMIT + 1), "1" + "0" * 30])
def test_a_listing_limit_outside_1_to_its_maximum_is_refused(value) -> None:
    with pytest.raises(GatewayError) as info:
        parse_list_query([("limit", value)])
    assert (info.value.status, info.value.param) == (400, "limit")
