"""`input_items`' query and page (gateway/openai/responses/listing.py): each order
taken by name, `include` refused under both its spellings, the refusals' whole
messages, and `has_more` at, below and above the last item."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.listing import ListQuery, list_page, parse_list_query

ITEMS = [{"id": f"msg_{i}"} for i in range(5)]


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_each_order_is_taken_by_name(order):
    assert parse_list_query([("order", order)]).order == order


@pytest.mark.parametrize(
    ("query", "param", "message"),
    [
        ([("order", "DESC")], "order", "'order' must be 'asc' or 'desc'; got 'DESC'."),
        ([("include", "x")], "include", "'include' 'x' is not supported by this gateway."),
        ([("include[]", "y")], "include", "'include' 'y' is not supported by this gateway."),
    ],
)
def test_a_query_refused_says_what_and_why(query, param, message):
    with pytest.raises(GatewayError) as info:
        parse_list_query(query)
    assert (info.value.status, info.value.param, info.value.message) == (400, param, message)


def test_an_after_that_is_not_an_item_names_it():
    with pytest.raises(GatewayError) as info:
        list_page(ITEMS, ListQuery(after="msg_9"))
    assert (info.value.param, info.value.message) == ("after", "'after' 'msg_9' is not an item of this response.")


@pytest.mark.parametrize(("limit", "has_more"), [(4, True), (5, False), (6, False)])
def test_has_more_is_true_only_while_items_are_left(limit, has_more):
    page = list_page(ITEMS, ListQuery(limit=limit, order="asc"))
    assert page["has_more"] is has_more and len(page["data"]) == min(limit, 5)
    after = list_page(ITEMS, ListQuery(limit=limit - 1, order="asc", after="msg_0"))
    assert after["has_more"] is has_more and after["first_id"] == "msg_1"
