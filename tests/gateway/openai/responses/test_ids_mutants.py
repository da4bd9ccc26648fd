"""gateway/openai/responses/ids.py: each id's prefix and 24 random bytes, and which
values could name a stored response (its suffix at, below and above 128 characters)."""

from __future__ import annotations

import re

from gateway.openai.responses.ids import (
    looks_like_response_id,
    new_function_call_id,
    new_function_call_output_id,
    new_message_id,
    new_response_id,
)


def test_each_id_is_its_prefix_and_48_hex_digits_fresh_each_time():
    for make, prefix in (
        (new_response_id, "resp"),
        (new_message_id, "msg"),
        (new_function_call_id, "fc"),
        (new_function_call_output_id, "fco"),
    ):
        first, second = make(), make()
        assert re.fullmatch(prefix + r"_[0-9a-f]{48}", first), first
        assert first != second


def test_what_could_name_a_stored_response():
    assert looks_like_response_id(new_response_id())
    assert looks_like_response_id("resp_" + "a" * 128)
    assert looks_like_response_id("resp_" + "a" * 127)
    assert looks_like_response_id("resp_a-_Z9")
    for value in ("resp_" + "a" * 129, "resp_", "msg_abc", "resp_a b", None, 3, b"resp_abc", ["resp_a"]):
        assert not looks_like_response_id(value), value


def test_a_response_id_with_a_trailing_newline_is_not_one():
    """`$` would match before a final newline; the whole string must be the id."""
    assert not looks_like_response_id("resp_a\n")
    assert looks_like_response_id("resp_a")
