"""engine/text/tool_parser.py: each piece the parser gives, in full (content, calls and the
dropped markup with its reason), for what the first mutation run left open: every drop
reason, the `parameters` alias, non-ASCII arguments, a third call's index, text read again
after a dropped or unterminated call, and the stray and orphan closing tags."""

from __future__ import annotations

import pytest

from engine.text.tool_parser import ContentPiece, DroppedCallPiece, HermesToolParser, ParsedPiece, ToolCallPiece

TOOLS = {"now", "get_weather"}
NOW = '{"name": "now", "arguments": {}}'
STRAY = DroppedCallPiece("</tool_call>", "a closing tag outside a call")


def parse(chunks: list[str], tool_names: set[str] | None = TOOLS) -> list[ParsedPiece]:
    parser = HermesToolParser(tool_names)
    out: list[ParsedPiece] = []
    for chunk in chunks:
        out += parser.feed(chunk)
    return out + parser.finish()


def call(index: int, name: str, arguments: str = "{}") -> list[ParsedPiece]:
    return [ToolCallPiece(index, name=name), ToolCallPiece(index, arguments=arguments)]


# ---- why a call is dropped -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"name": nope}', "its body is not JSON"),
        ("[1, 2]", "its body is not a JSON object"),
        ('"now"', "its body is not a JSON object"),
        ('{"arguments": {}}', "it has no name"),
        ('{"name": "", "arguments": {}}', "it has no name"),
        ('{"name": 5, "arguments": {}}', "it has no name"),
        ('{"name": "later", "arguments": {}}', "'later' is not one of the request's tools"),
        ('{"name": "now", "arguments": "{}"}', "its arguments are not a JSON object"),
        ('{"name": "now"}', "its arguments are not a JSON object"),
    ],
)
def test_each_reason_a_call_is_dropped(body, reason):
    text = f"<tool_call>{body}</tool_call>"
    assert parse([text, "ok"]) == [DroppedCallPiece(text, reason), ContentPiece("ok")]


def test_parameters_stand_for_arguments_and_arguments_win():
    assert parse(['<tool_call>{"name": "now", "parameters": {"a": 1}}</tool_call>']) == call(0, "now", '{"a": 1}')
    both = '<tool_call>{"name": "now", "arguments": {"b": 2}, "parameters": {"a": 1}}</tool_call>'
    assert parse([both]) == call(0, "now", '{"b": 2}')


def test_non_ascii_arguments_are_written_as_they_are():
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Z\\u00fcrich \u6771\u4eac"}}</tool_call>'
    assert parse([text]) == call(0, "get_weather", '{"city": "Z\u00fcrich \u6771\u4eac"}')


def test_three_calls_are_numbered_in_order():
    text = "".join(f"<tool_call>{NOW}</tool_call>\n" for _ in range(3))
    assert parse([text]) == call(0, "now") + call(1, "now") + call(2, "now")


# ---- what follows a dropped or finished call ------------------------------------------------


def test_a_dropped_call_ends_at_its_first_closing_tag():
    assert parse(["<tool_call>[1]</tool_call>hi</tool_call>"]) == [
        DroppedCallPiece("<tool_call>[1]</tool_call>", "its body is not a JSON object"),
        ContentPiece("hi"),
        STRAY,
    ]


def test_a_call_after_a_dropped_one_in_the_same_chunk_is_read():
    text = f"<tool_call>[1]</tool_call><tool_call>{NOW}</tool_call>"
    assert parse([text]) == [
        DroppedCallPiece("<tool_call>[1]</tool_call>", "its body is not a JSON object"),
        *call(0, "now"),
    ]


def test_text_and_a_call_after_an_unclosed_call_in_the_same_chunk_are_read():
    assert parse([f"<tool_call>{NOW}x<tool_call>{NOW}</tool_call>"]) == [
        *call(0, "now"),
        ContentPiece("x"),
        *call(1, "now"),
    ]


def test_a_second_closing_tag_after_a_call_is_a_stray_one():
    assert parse([f"<tool_call>{NOW}</tool_call></tool_call>x"]) == [*call(0, "now"), STRAY, ContentPiece("x")]


def test_an_invalid_call_the_output_ends_inside_is_dropped_whole_with_its_reason():
    assert parse(["<tool_call>[1] and more </tool"]) == [
        DroppedCallPiece("<tool_call>[1] and more </tool", "its body is not a JSON object")
    ]


def test_an_unterminated_value_is_cut_at_its_first_closing_tag():
    text = '<tool_call>{"name": "now", </tool_call>after</tool_call>'
    assert parse([text]) == [
        DroppedCallPiece('<tool_call>{"name": "now", </tool_call>', "its JSON never ended"),
        ContentPiece("after"),
        STRAY,
    ]


def test_a_value_the_output_ends_inside_is_dropped_saying_so():
    assert parse(['<tool_call>{"name": "now", "arg']) == [
        DroppedCallPiece('<tool_call>{"name": "now", "arg', "the output ended inside the call")
    ]


def test_a_partial_tag_at_the_end_is_content():
    assert parse(["Hi <tool"]) == [ContentPiece("Hi "), ContentPiece("<tool")]
    assert parse(["Hi ", "</tool_ca"]) == [ContentPiece("Hi "), ContentPiece("</tool_ca")]


# ---- stray and orphan closing tags -----------------------------------------------------------


def test_a_stray_closing_tag_is_dropped_first_of_all():
    assert parse(["</tool_call>hi"]) == [STRAY, ContentPiece("hi")]


def test_each_stray_closing_tag_is_dropped_where_it_is():
    assert parse(["a</tool_call>b</tool_call>c"]) == [
        ContentPiece("a"),
        STRAY,
        ContentPiece("b"),
        STRAY,
        ContentPiece("c"),
    ]


def test_a_tag_cut_by_a_stray_closing_tag_opens_the_call():
    assert parse([f"x<tool</tool_call>_call>{NOW}</tool_call>"]) == [ContentPiece("x"), STRAY, *call(0, "now")]


def test_a_released_partial_tag_joined_by_its_rest_after_a_stray_tag_is_markup():
    # "<tool" went out as content before "</tool_call>" came; "_call>" completes the start tag
    assert parse(["<tool<", f"/tool_call>_call>{NOW}</tool_call>"]) == [
        ContentPiece("<tool"),
        STRAY,
        *call(0, "now"),
    ]
    assert parse(["</tool<", "/tool_call>_call>z"]) == [ContentPiece("</tool"), STRAY, STRAY, ContentPiece("z")]


# ---- whitespace ------------------------------------------------------------------------------


def test_text_of_only_whitespace_is_content():
    assert parse(["  "]) == [ContentPiece("  ")]
    assert parse([" \n", f"<tool_call>{NOW}</tool_call>"]) == [ContentPiece(" \n"), *call(0, "now")]


def test_once_content_follows_a_call_its_whitespace_is_content_however_cut():
    chunks = [f"<tool_call>{NOW}</tool_call>", "x", " ", f"<tool_call>{NOW}</tool_call>"]
    assert parse(chunks) == [*call(0, "now"), ContentPiece("x"), ContentPiece(" "), *call(1, "now")]


def test_content_read_again_at_the_end_joins_the_held_tail():
    text = '<tool_call>{"name": "now", </tool_call></tool_call>after <tool'
    assert parse([text]) == [
        DroppedCallPiece('<tool_call>{"name": "now", </tool_call>', "its JSON never ended"),
        STRAY,
        ContentPiece("after <tool"),
    ]
