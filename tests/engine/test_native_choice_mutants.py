"""adapters/native_choice.py on scripted engine outputs through the tiny model's real
tokenizer (no engine: one choice's way from token ids to events is the module's whole
job): which final token is not text, what a finish releases, logprobs on steps with and
without text (their top alternatives in full), the tool-call stage a request gets, and
the upstream error an unknown finish reason becomes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from adapters.base import Finish, GenerationRequest, LogprobsDelta, TextDelta, ToolCallDelta
from adapters.errors import GatewayError
from adapters.native_choice import ChoiceEvents, tool_stage
from engine.llm_engine import TokenOutput
from engine.make_tiny import make_tiny
from engine.text.forced_tool_calls import ToolCallFormatError
from engine.text.tokenizer import TextTokenizer

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TWO_CALLS = CALL + '\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    model_dir: Path = make_tiny(tmp_path_factory.mktemp("choice") / "tiny")
    return TextTokenizer(model_dir)


def out(ids: list[int], finished: bool = False, reason: str | None = None, logprobs=None) -> TokenOutput:
    return TokenOutput("r", 1, ids, logprobs, finished, reason, 5, 0)


def choice(tok: TextTokenizer, *, stop=(), stop_ids=(), eos=None, tools=None, request_id="r-7") -> ChoiceEvents:
    eos_ids = {tok.token_to_id("<|im_end|>")} if eos is None else eos
    return ChoiceEvents(1, tok, list(stop), list(stop_ids), eos_ids, tools, request_id)


def one_token_each(tok: TextTokenizer, text: str, reason: str = "stop", last: list[int] = ()) -> list[TokenOutput]:
    ids = tok.encode(text) + list(last)
    return [out([t], i == len(ids) - 1, reason if i == len(ids) - 1 else None) for i, t in enumerate(ids)]


def run(c: ChoiceEvents, outputs: list[TokenOutput], want_logprobs: bool = False) -> list:
    events: list = []
    for o in outputs:
        events += c.step(o, want_logprobs)
        if c.done:
            break
    return events


def text_of(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def finish_of(events: list) -> str:
    (finish,) = [e for e in events if isinstance(e, Finish)]
    assert finish.index == 1
    return finish.reason


def calls_of(events: list) -> list[tuple[str, str]]:
    calls: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, ToolCallDelta):
            assert e.index == 1 and e.id is None
            call = calls.setdefault(e.tool_index, ["", ""])
            call[0] += e.name or ""
            call[1] += e.arguments or ""
    return [(name, args) for name, args in (calls[i] for i in sorted(calls))]


# ---- the token that ended the choice -----------------------------------------------


def test_the_final_stop_tokens_are_not_text_however_many_tokens_the_step_holds(tok) -> None:
    x = tok.encode("x")
    assert len(x) == 1
    ids = tok.encode("ab") + x
    events = run(choice(tok, stop_ids=x), [out(ids, True, "stop")])
    assert (text_of(events), finish_of(events)) == ("ab", "stop")


def test_an_eos_that_is_a_text_token_is_not_text_either(tok) -> None:
    x = tok.encode("x")
    events = run(choice(tok, eos=set(x)), [out(tok.encode("ab") + x, True, "stop")])
    assert text_of(events) == "ab"


def test_a_stop_token_id_ending_a_length_finish_is_text(tok) -> None:
    x = tok.encode("x")
    events = run(choice(tok, stop_ids=x), one_token_each(tok, "abx", "length"))
    assert (text_of(events), finish_of(events)) == ("abx", "length")


def test_a_final_step_without_tokens_ends_the_choice(tok) -> None:
    events = run(choice(tok), [*one_token_each(tok, "ab", None)[:-1], out(tok.encode("b")), out([], True, "stop")])
    assert (text_of(events), finish_of(events)) == ("ab", "stop")


def test_a_finish_releases_what_a_possible_stop_string_held_back(tok) -> None:
    c = choice(tok, stop=["xyz"])
    held = c.step(out(tok.encode("abxy")), False)
    assert text_of(held) == "ab"  # "xy" may begin the stop string
    events = c.step(out(tok.encode("q"), True, "length"), False)
    assert (text_of(events), finish_of(events)) == ("xyq", "length")
    c = choice(tok, stop=["xyz"])
    assert text_of(c.step(out(tok.encode("ab")), False)) == "ab"
    events = c.step(out(tok.encode("xy"), True, "length"), False)  # ends on what may begin it
    assert (text_of(events), finish_of(events)) == ("xy", "length")


# ---- logprobs ----------------------------------------------------------------------


def logprobs_for(ids: list[int]) -> list:
    return [(-0.5 - i, [(t, -0.25), (3, -1.5)]) for i, t in enumerate(ids)]


def test_logprobs_carry_every_top_alternative_in_full(tok) -> None:
    ids = tok.encode("ab")
    events = run(choice(tok), [out(ids, logprobs=logprobs_for(ids))], want_logprobs=True)
    (delta,) = events
    assert isinstance(delta, TextDelta) and delta.text == "ab"
    assert [(lp.token, lp.logprob, lp.bytes) for lp in delta.logprobs] == [
        (tok.token_text(t), -0.5 - i, list(tok.token_bytes(t))) for i, t in enumerate(ids)
    ]
    tops = [[(top.token, top.logprob, top.bytes) for top in lp.top] for lp in delta.logprobs]
    three = (tok.token_text(3), -1.5, list(tok.token_bytes(3)))
    assert tops == [[(tok.token_text(t), -0.25, list(tok.token_bytes(t))), three] for t in ids]


def test_logprobs_of_a_step_without_text_come_first_on_their_own(tok) -> None:
    c = choice(tok, stop=["xyz"])
    ids = tok.encode("xy")  # held back: no text this step
    (only,) = c.step(out(ids, logprobs=logprobs_for(ids)), True)
    assert isinstance(only, LogprobsDelta) and only.index == 1
    assert [lp.token for lp in only.logprobs] == [tok.token_text(t) for t in ids]


def test_logprobs_of_a_tool_call_step_come_before_its_call(tok) -> None:
    request = GenerationRequest("r-7", "m", tools=[WEATHER], tool_choice="auto")
    c = choice(tok, tools=tool_stage(request, forced=False))
    ids = tok.encode(CALL)
    events = c.step(out(ids, True, "stop", logprobs=logprobs_for(ids)), True)
    assert isinstance(events[0], LogprobsDelta) and events[0].index == 1
    assert len(events[0].logprobs) == len(ids)
    assert calls_of(events) == [("get_weather", '{"city": "Paris"}')]
    assert finish_of(events) == "tool_calls"


def test_logprobs_only_when_the_client_asked(tok) -> None:
    ids = tok.encode("ab")
    events = run(choice(tok), [out(ids, True, "length", logprobs=logprobs_for(ids))], want_logprobs=False)
    assert [type(e) for e in events] == [TextDelta, Finish] and events[0].logprobs is None
    asked_but_none = run(choice(tok), [out(ids, True, "length")], want_logprobs=True)
    assert [type(e) for e in asked_but_none] == [TextDelta, Finish] and asked_but_none[0].logprobs is None


# ---- the tool-call stage a request gets ----------------------------------------------


def test_no_stage_without_tools_or_with_tool_choice_none() -> None:
    assert tool_stage(GenerationRequest("r", "m", tool_choice="auto"), forced=False) is None
    assert tool_stage(GenerationRequest("r", "m", tools=[], tool_choice="auto"), forced=False) is None
    assert tool_stage(GenerationRequest("r", "m", tools=[WEATHER], tool_choice="none"), forced=False) is None
    assert tool_stage(GenerationRequest("r", "m", tools=[WEATHER], tool_choice="auto"), forced=False) is not None
    assert tool_stage(GenerationRequest("r", "m", tools=[WEATHER]), forced=False) is not None


@pytest.mark.parametrize("parallel", [True, False])
def test_the_stage_knows_the_requests_tools_and_parallel_calls(tok, parallel) -> None:
    # malformed tool entries name nothing; a call to a name the request lacks is dropped
    tools = [WEATHER, NOW, "oops", {"function": "oops"}, {"function": {"name": 5}}, {"type": "function"}]
    request = GenerationRequest("r-7", "m", tools=tools, tool_choice="auto", parallel_tool_calls=parallel)
    unknown = '\n<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call>'
    events = run(choice(tok, tools=tool_stage(request, forced=False)), one_token_each(tok, TWO_CALLS + unknown))
    expected = [("get_weather", '{"city": "Paris"}'), ("now", "{}")]
    assert calls_of(events) == (expected if parallel else expected[:1])
    assert text_of(events) == "" and finish_of(events) == "tool_calls"


def test_a_forced_stage_reads_by_the_grammar_not_as_free_text(tok) -> None:
    request = GenerationRequest("r-7", "m", tools=[WEATHER], tool_choice="required")
    free = run(choice(tok, tools=tool_stage(request, forced=False)), one_token_each(tok, "hello"))
    assert text_of(free) == "hello"
    with pytest.raises(ToolCallFormatError):
        run(choice(tok, tools=tool_stage(request, forced=True)), one_token_each(tok, "hello"))


def test_a_dropped_call_is_logged_with_the_request_and_why(tok, caplog: pytest.LogCaptureFixture) -> None:
    request = GenerationRequest("r-7", "m", tools=[WEATHER], tool_choice="auto")
    with caplog.at_level(logging.WARNING, logger="adapters.native_choice"):
        events = run(
            choice(tok, tools=tool_stage(request, forced=False)), one_token_each(tok, "a <tool_call>{x}</tool_call>")
        )
    assert text_of(events) == "a " and not calls_of(events)
    (record,) = [r for r in caplog.records if r.name == "adapters.native_choice"]
    assert (
        record.getMessage()
        == "request r-7: dropped a malformed tool call (its body is not JSON): '<tool_call>{x}</tool_call>'"
    )


# ---- finish reasons --------------------------------------------------------------------


def test_an_unknown_finish_reason_is_an_upstream_failure_naming_the_request(tok, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="switchyard.upstream"), pytest.raises(GatewayError) as info:
        run(choice(tok), one_token_each(tok, "ab", "error"))
    assert (info.value.status, info.value.code) == (502, "upstream_error")
    assert info.value.message.endswith("failed: the engine ended the generation unexpectedly")
    assert "backend native failed: the engine ended the generation unexpectedly (finish reason 'error' on r-7)" in (
        caplog.text
    )


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_the_engines_own_reasons_pass_as_they_are(tok, reason) -> None:
    assert finish_of(run(choice(tok), one_token_each(tok, "ab", reason))) == reason
