"""The free-text hermes tool-call parser (tool_choice "auto") on scripted streams, split at every
boundary: calls by JSON structure, never tag markup in content, malformed calls dropped."""

from __future__ import annotations

import json

import pytest

from engine.make_tiny import make_tiny
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.tokenizer import TextTokenizer
from engine.text.tool_parser import ContentPiece, DroppedCallPiece, HermesToolParser, ParsedPiece, ToolCallPiece

TOOLS = {"get_weather", "now", "search"}

ONE_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}\n</tool_call>'
TWO_CALLS = (
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa\\"ris </x>"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>\n'
)
REORDERED = '<tool_call>{"arguments": {"q": "kv"}, "name": "search"}</tool_call>'


def parse(chunks: list[str], tool_names: set[str] | None = TOOLS) -> list[ParsedPiece]:
    parser = HermesToolParser(tool_names)
    out: list[ParsedPiece] = []
    for chunk in chunks:
        out += parser.feed(chunk)
    out += parser.finish()
    return out


def summary(pieces: list[ParsedPiece]) -> tuple[str, list[dict]]:
    """(all content, calls as {name, arguments}) with the stream's invariants checked on the way:
    a call's name comes once, in its first piece; its arguments follow in order."""
    content = ""
    calls: list[dict] = []
    for piece in pieces:
        if isinstance(piece, ContentPiece):
            content += piece.text
            continue
        if isinstance(piece, DroppedCallPiece):
            continue
        assert isinstance(piece, ToolCallPiece)
        if piece.name is not None:
            assert piece.tool_index == len(calls), "tool indices are dense and in order"
            assert piece.arguments == "", "the first piece of a call carries only its name"
            calls.append({"name": piece.name, "arguments": ""})
        else:
            assert piece.tool_index == len(calls) - 1, "arguments belong to the latest call"
            calls[-1]["arguments"] += piece.arguments
    return content, calls


def splits(text: str) -> list[list[str]]:
    """Every cut of `text` into two pieces, and every cut into three pieces around the tags."""
    out = [[text[:i], text[i:]] for i in range(len(text) + 1)]
    for i in range(0, len(text) + 1, 3):
        for j in range(i, len(text) + 1, 5):
            out.append([text[:i], text[i:j], text[j:]])
    return out


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    return TextTokenizer(make_tiny(tmp_path_factory.mktemp("tp") / "tiny"))


def test_one_call() -> None:
    content, calls = summary(parse([ONE_CALL]))
    assert content == ""
    assert calls == [{"name": "get_weather", "arguments": '{"city": "Paris", "days": [1, 2]}'}]


@pytest.mark.parametrize("text", [ONE_CALL, TWO_CALLS, REORDERED])
def test_every_two_and_three_way_split_gives_the_same_result(text: str) -> None:
    expected = summary(parse([text]))
    for chunks in splits(text):
        assert summary(parse(chunks)) == expected, chunks


def test_character_by_character() -> None:
    assert summary(parse(list(TWO_CALLS))) == summary(parse([TWO_CALLS]))


def test_two_calls_content_and_indices() -> None:
    content, calls = summary(parse(list(TWO_CALLS)))
    assert content == "Let me check.\n"  # the newlines between and after calls are layout
    assert [c["name"] for c in calls] == ["get_weather", "now"]
    assert json.loads(calls[0]["arguments"]) == {"city": 'Pa"ris </x>'}
    assert calls[1]["arguments"] == "{}"


def test_scripted_token_stream_through_the_detokenizer(tok: TextTokenizer) -> None:
    # The tokens a model would emit, one at a time, as the native adapter feeds them.
    ids = tok.encode(TWO_CALLS + "<|im_end|>")
    detok = IncrementalDetokenizer(tok)
    parser = HermesToolParser(TOOLS)
    pieces: list[ParsedPiece] = []
    for token_id in ids:
        pieces += parser.feed(detok.add([token_id]))
    pieces += parser.feed(detok.flush()) + parser.finish()
    assert summary(pieces) == summary(parse([TWO_CALLS]))


def test_a_call_comes_whole_once_its_json_is_complete() -> None:
    # Only a complete value can be known to be a valid call, so nothing goes out before.
    parser = HermesToolParser(TOOLS)
    assert parser.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa') == []
    second = parser.feed('ris"}}\n</tool')
    assert second == [ToolCallPiece(0, name="get_weather"), ToolCallPiece(0, arguments='{"city": "Paris"}')]
    assert parser.feed("_call>") == []
    assert parser.num_calls == parser.num_closed_calls == 1


def test_tag_text_inside_a_json_string_is_string_text() -> None:
    # The end of a call is found by its JSON structure, never by searching for the tag.
    text = '<tool_call>\n{"name": "search", "arguments": {"q": "a </tool_call> b <tool_call> c"}}\n</tool_call>after'
    for chunks in splits(text):
        content, calls = summary(parse(chunks))
        assert calls == [{"name": "search", "arguments": '{"q": "a </tool_call> b <tool_call> c"}'}], chunks
        assert content == "after", chunks


def test_possible_start_tag_is_held_back() -> None:
    parser = HermesToolParser(TOOLS)
    assert parser.feed("Hello <tool") == [ContentPiece("Hello ")]
    assert parser.feed("box>") == [ContentPiece("<toolbox>")]  # not a tag after all
    assert parser.finish() == []


@pytest.mark.parametrize(
    ("text", "after"),
    [
        ('<tool_call>{"name": 5, "arguments": {}}</tool_call>', " after"),  # name not a string
        ("<tool_call>not json</tool_call>", " after"),
        ('<tool_call>"a string </tool_call>', " after"),  # not an object: the tag is searched as text
        ("<tool_call>{oops}</tool_call>", " after"),
        ('<tool_call>{"arguments": {}}</tool_call>', " after"),  # no name
        ('<tool_call>{"name": "now", "arguments": "{}"}</tool_call>', " after"),  # arguments not an object
        ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', " after"),  # not one of the request's tools
        ('<tool_call>{"arguments": {}, "name": "rm_rf"}</tool_call>', " after"),
        # Unterminated: the JSON never ends, so the call reaches the end of the output, " after" included.
        ('<tool_call>{"name": "get_wea', ""),
    ],
)
def test_malformed_calls_are_dropped_never_content(text: str, after: str) -> None:
    for chunks in splits(text):
        pieces = parse(["before ", *chunks, " after"])
        content, calls = summary(pieces)
        assert calls == [], chunks
        assert content == "before " + after, chunks
        dropped = [p for p in pieces if isinstance(p, DroppedCallPiece)]
        assert len(dropped) == 1 and dropped[0].reason, chunks
        assert dropped[0].text == (text if after else text + " after"), chunks


def test_an_unterminated_call_ends_at_its_first_closing_tag() -> None:
    # Known only when the output ends: the call is cut at the first tag and what follows is read again.
    text = '<tool_call>{"name": "now", "arguments": </tool_call>tail <tool_call>{"name": "now", "arguments": {}}'
    for chunks in splits(text):
        pieces = parse(chunks)
        content, calls = summary(pieces)
        assert content == "tail " and calls == [{"name": "now", "arguments": "{}"}], chunks
        dropped = [p.text for p in pieces if isinstance(p, DroppedCallPiece)]
        assert dropped == ['<tool_call>{"name": "now", "arguments": </tool_call>'], chunks


def test_unknown_names_are_accepted_without_a_tool_list() -> None:
    _, calls = summary(parse(['<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'], tool_names=None))
    assert [c["name"] for c in calls] == ["rm_rf"]


def test_reordered_keys_are_parsed_when_the_call_closes() -> None:
    pieces = parse([REORDERED])
    content, calls = summary(pieces)
    assert content == "" and calls[0]["name"] == "search"
    assert json.loads(calls[0]["arguments"]) == {"q": "kv"}


def test_call_without_closing_tag_is_a_call() -> None:
    # A model may end (EOS or max_tokens) right after the JSON: the JSON is the call.
    content, calls = summary(parse(['<tool_call>\n{"name": "now", "arguments": {"tz": "UTC"}}\n']))
    assert content == "" and calls == [{"name": "now", "arguments": '{"tz": "UTC"}'}]


def test_text_after_a_call_without_closing_tag_is_content() -> None:
    text = '<tool_call>{"name": "now", "arguments": {}}\nIt is noon.'
    for chunks in splits(text):
        assert summary(parse(chunks)) == ("\nIt is noon.", [{"name": "now", "arguments": "{}"}]), chunks


def test_plain_text_passes_through() -> None:
    text = 'No tools here: a < b and {"json": true} </tool_cal <tool_cal>'
    for chunks in splits(text):
        assert summary(parse(chunks)) == (text, [])


def test_a_stray_closing_tag_is_dropped() -> None:
    text = 'No call open: {"json": true} </tool_call> and on'
    for chunks in splits(text):
        pieces = parse(chunks)
        assert summary(pieces) == ('No call open: {"json": true}  and on', []), chunks
        assert [p.text for p in pieces if isinstance(p, DroppedCallPiece)] == ["</tool_call>"]


def test_text_after_the_calls_keeps_only_its_own_leading_space() -> None:
    # The newline between the two calls is layout and dropped; the one before "Done." stays with it.
    content, calls = summary(parse(list(TWO_CALLS.rstrip("\n") + "\nDone.")))
    assert len(calls) == 2
    assert content == "Let me check.\n\nDone."


@pytest.mark.parametrize(
    "chunks", [["<tool</tool_call>_call>"], ["<tool<", "/tool_call>_call>"], list("<tool</tool_call>_call>")]
)
def test_a_stray_closing_tag_does_not_join_two_halves_of_a_tag_into_content(chunks: list[str]) -> None:
    # Found by the property test: dropping the stray tag must not leave `<tool` and
    # `_call>` side by side in the content.
    pieces = parse(chunks)
    content = "".join(p.text for p in pieces if isinstance(p, ContentPiece))
    assert "<tool_call>" not in content and "</tool_call>" not in content
    assert not any(isinstance(p, ToolCallPiece) for p in pieces)
