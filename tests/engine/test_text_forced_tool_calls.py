"""The forced tool-call reader and stage: grammar-shaped text read by structure, split at every
boundary; tag text inside argument strings; cut output; output that leaves the grammar."""

from __future__ import annotations

import json

import llguidance
import pytest

from engine.make_tiny import make_tiny
from engine.structured import grammar_tokenizer
from engine.structured.grammars import ToolSpec, tool_calls_grammar
from engine.structured.schemas import prepare_schema
from engine.text.forced_tool_calls import ForcedToolCallReader, ToolCallFormatError
from engine.text.hermes_format import ContentPiece, ToolCallPiece
from engine.text.tokenizer import TextTokenizer
from engine.text.tool_call_stage import ToolCallStage

# The exact shape of issue 13's failure: the first call's string holds the closing tag.
TRICKY = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "x</tool_call>owC\\"}}\\n<tool_call>"}}\n'
    "</tool_call>\n"
    '<tool_call>\n{"name": "now", "arguments": {"n": [1, {"a": "<tool_call>"}], "f": -2.5e3}}\n</tool_call>'
)
TRICKY_CALLS = [
    ("get_weather", {"city": 'x</tool_call>owC"}}\n<tool_call>'}),
    ("now", {"n": [1, {"a": "<tool_call>"}], "f": -2.5e3}),
]


def read(chunks: list[str]) -> tuple[ForcedToolCallReader, list[tuple[str, str]]]:
    reader = ForcedToolCallReader()
    calls: list[list[str]] = []
    for chunk in chunks:
        for piece in reader.feed(chunk):
            assert not isinstance(piece, ContentPiece), "forced output never becomes content"
            assert isinstance(piece, ToolCallPiece)
            if piece.name is not None:
                assert piece.tool_index == len(calls) and piece.arguments == ""
                calls.append([piece.name, ""])
            else:
                assert piece.tool_index == len(calls) - 1
                calls[-1][1] += piece.arguments
    assert reader.finish() == []
    return reader, [(name, args) for name, args in calls]


def test_tag_text_inside_strings_at_every_split() -> None:
    for i in range(len(TRICKY) + 1):
        for j in range(i, len(TRICKY) + 1, 7):
            reader, calls = read([TRICKY[:i], TRICKY[i:j], TRICKY[j:]])
            assert [(n, json.loads(a)) for n, a in calls] == TRICKY_CALLS, (i, j)
            assert reader.complete and reader.num_closed_calls == 2


def test_character_by_character_arguments_stream_as_they_come() -> None:
    reader = ForcedToolCallReader()
    pieces = [p for ch in TRICKY for p in reader.feed(ch)]
    argument_pieces = [p for p in pieces if p.name is None]
    assert len(argument_pieces) > 20  # one per character of the arguments, not one per call


@pytest.mark.parametrize("cut", [0, 5, 11, 25, 40, 60, 90, len(TRICKY) - 5, len(TRICKY) - 1])
def test_text_cut_inside_a_call_is_not_complete(cut: int) -> None:
    reader, calls = read([TRICKY[:cut]])
    assert not reader.complete
    assert len(calls) <= 2


def test_text_ending_after_a_separator_is_not_complete() -> None:
    first_end = TRICKY.index("</tool_call>\n<tool_call>") + len("</tool_call>")
    assert read([TRICKY[:first_end]])[0].complete
    assert not read([TRICKY[: first_end + 1]])[0].complete


@pytest.mark.parametrize(
    "text",
    [
        "Sure! " + TRICKY,  # content before the calls
        TRICKY + " done",  # text after them
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>',  # layout the grammar does not write
        '<tool_call>\n{"name": 5, "arguments": {}}}\n</tool_call>',
    ],
)
def test_text_outside_the_grammar_raises(text: str) -> None:
    with pytest.raises(ToolCallFormatError):
        read([text])


# ---- the stage: finish reasons ------------------------------------------------------


def stage_run(text: str, reason: str, *, parallel: bool = True) -> tuple[list, str | None]:
    stage = ToolCallStage(forced=True, tool_names={"get_weather", "now"}, parallel_tool_calls=parallel)
    step = stage.step(text, finishing=True, reason=reason)
    assert not step.dropped and step.finishing
    return step.pieces, step.reason


def test_complete_calls_finish_with_tool_calls() -> None:
    pieces, reason = stage_run(TRICKY, "stop")
    assert reason == "tool_calls" and [p.name for p in pieces if p.name] == ["get_weather", "now"]


def test_a_further_call_cut_by_max_tokens_is_not_sent() -> None:
    # After one whole call the model may stop: a second call that max_tokens cuts is held
    # back and dropped, and the answer is the whole calls before it.
    pieces, reason = stage_run(TRICKY[:-20], "length")
    assert reason == "tool_calls" and [p.name for p in pieces if p.name] == ["get_weather"]
    assert all(p.tool_index == 0 for p in pieces)


def test_the_first_call_cut_by_max_tokens_says_length() -> None:
    # nothing whole to answer with: the cut first call streams as it came, and `length` says so
    pieces, reason = stage_run(TRICKY[:40], "length")
    assert reason == "length" and [p.name for p in pieces if p.name] == ["get_weather"]


FIRST_END = TRICKY.index("</tool_call>\n<tool_call>") + len("</tool_call>")


@pytest.mark.parametrize("cut", range(FIRST_END, len(TRICKY) + 1, 3))
def test_every_call_after_the_first_arrives_whole_wherever_max_tokens_cuts(cut: int) -> None:
    stage = ToolCallStage(forced=True, tool_names={"get_weather", "now"}, parallel_tool_calls=True)
    calls: dict[int, str] = {}
    for i in range(cut):  # streamed character by character, as tokens arrive
        step = stage.step(TRICKY[i], finishing=i == cut - 1, reason="length" if cut < len(TRICKY) else "stop")
        for piece in step.pieces:
            calls[piece.tool_index] = calls.get(piece.tool_index, "") + piece.arguments
    assert step.reason == "tool_calls"  # the first call is whole: the answer is whole calls
    assert [json.loads(arguments) for arguments in calls.values()] == [args for _, args in TRICKY_CALLS[: len(calls)]]


def test_the_first_call_streams_as_it_comes_and_a_further_one_once_whole() -> None:
    stage = ToolCallStage(forced=True, tool_names={"get_weather", "now"}, parallel_tool_calls=True)
    second = TRICKY.index("</tool_call>\n<tool_call>") + len("</tool_call>\n")
    first_pieces = stage.step(TRICKY[:60], finishing=False, reason=None).pieces
    assert [p.tool_index for p in first_pieces] and all(p.tool_index == 0 for p in first_pieces)
    stage.step(TRICKY[60:second], finishing=False, reason=None)
    assert stage.step(TRICKY[second:-5], finishing=False, reason=None).pieces == []  # open: held
    released = stage.step(TRICKY[-5:], finishing=False, reason=None).pieces
    assert released[0].name == "now" and json.loads("".join(p.arguments for p in released)) == TRICKY_CALLS[1][1]


def test_a_stop_inside_a_forced_call_is_an_error_not_an_answer() -> None:
    with pytest.raises(ToolCallFormatError, match="ended inside a tool call"):
        stage_run(TRICKY[:-20], "stop")


def test_one_call_when_parallel_calls_are_off() -> None:
    stage = ToolCallStage(forced=True, tool_names={"get_weather", "now"}, parallel_tool_calls=False)
    first_end = TRICKY.index("</tool_call>\n<tool_call>") + len("</tool_call>")
    step = stage.step(TRICKY[:first_end], finishing=False, reason=None)
    assert step.finishing and step.reason == "tool_calls"
    assert [p.name for p in step.pieces if p.name] == ["get_weather"]


# ---- the grammar writes what the reader reads ------------------------------------------


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    return TextTokenizer(make_tiny(tmp_path_factory.mktemp("forced") / "tiny"))


def test_the_grammar_accepts_tag_text_in_strings_and_the_reader_reads_it(tok: TextTokenizer) -> None:
    specs = [
        ToolSpec(
            "get_weather",
            prepare_schema({"type": "object", "properties": {"city": {"type": "string"}}}, param="p"),
            "p",
        ),
        ToolSpec("now", prepare_schema({"type": "object"}, param="p"), "p"),
    ]
    eos = set(tok.eos_token_ids)
    matcher = llguidance.LLMatcher(
        grammar_tokenizer(tok, tok.vocab_size, eos), tool_calls_grammar(specs, multiple=True), log_level=0
    )
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a</tool_call>\\n<tool_call>b"}}\n</tool_call>'
        '\n<tool_call>\n{"name": "now", "arguments": {"k": "</tool_call>"}}\n</tool_call>'
    )
    assert matcher.consume_tokens(tok.encode(text)), matcher.get_error()
    assert matcher.is_accepting()
    reader, calls = read([text])
    assert reader.complete
    assert [(n, json.loads(a)) for n, a in calls] == [
        ("get_weather", {"city": "a</tool_call>\n<tool_call>b"}),
        ("now", {"k": "</tool_call>"}),
    ]
