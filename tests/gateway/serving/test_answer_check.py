"""What a rollout reads of one answer (gateway/serving/answer_check.py) and how the
mirror compares two (gateway/serving/mirror.py `compare`), on hand-made events: tool
calls named with JSON-object arguments, structured text valid against the request's
schema, and each kind of difference named."""

from __future__ import annotations

from adapters.base import Finish, GenerationRequest, TextDelta, ToolCallDelta, Usage
from gateway.serving.answer_check import AnswerCheck
from gateway.serving.mirror import CandidateAnswer, compare
from policies.rollout_records import TrackRecord

TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def check(events, **req) -> AnswerCheck:
    tally = AnswerCheck(GenerationRequest("r", "m", messages=[], **req))
    for event in events:
        tally.saw(event)
    return tally


def call(name: str | None, *arguments: str) -> list:
    first = ToolCallDelta(0, 0, name=name, arguments=arguments[0] if arguments else "")
    return [first, *(ToolCallDelta(0, 0, arguments=a) for a in arguments[1:]), Finish(0, "tool_calls")]


def test_tool_calls_are_valid_when_named_with_a_json_object_in_pieces():
    assert check(call("get_weather", '{"ci', 'ty": "Paris"}'), tools=TOOLS).tool_calls_valid is True
    assert check(call("get_weather", '{"city": '), tools=TOOLS).tool_calls_valid is False
    assert check(call("get_weather", '"Paris"'), tools=TOOLS).tool_calls_valid is False  # JSON, not an object
    assert check(call(None, "{}"), tools=TOOLS).tool_calls_valid is False


def test_tool_validity_is_judged_only_where_a_call_was_offered_and_made_or_forced():
    answered = [TextDelta(0, "no call"), Finish(0, "stop")]
    assert check(answered).tool_calls_valid is None  # no tools
    assert check(answered, tools=TOOLS).tool_calls_valid is None  # offered, not forced, not made
    assert check(answered, tools=TOOLS, tool_choice="none").tool_calls_valid is None
    assert check(answered, tools=TOOLS, tool_choice="required").tool_calls_valid is False


def test_structured_answers_are_judged_against_the_requests_schema():
    def fmt(schema):
        return {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}

    good = [TextDelta(0, '{"city":'), TextDelta(0, ' "Paris"}'), Finish(0, "stop")]
    wrong = [TextDelta(0, '{"town": "Paris"}'), Finish(0, "stop")]
    cut = [TextDelta(0, '{"city": "Par'), Finish(0, "length")]
    assert check(good, response_format=fmt(SCHEMA)).structured_valid is True
    assert check(wrong, response_format=fmt(SCHEMA)).structured_valid is False
    assert check(cut, response_format=fmt(SCHEMA)).structured_valid is False
    assert check(wrong, response_format={"type": "json_object"}).structured_valid is True
    assert (
        check([TextDelta(0, "[1]"), Finish(0, "stop")], response_format={"type": "json_object"}).structured_valid
        is False
    )
    assert check(good).structured_valid is None  # not asked
    # a schema jsonschema cannot read judges nothing
    assert check(good, response_format=fmt({"type": 12})).structured_valid is True


def test_the_inter_token_gap_needs_two_output_events_of_a_stream():
    assert check([TextDelta(0, "a"), Finish(0, "stop")], stream=True).itl_s is None
    three = [TextDelta(0, "a"), TextDelta(0, "b"), TextDelta(0, "c"), Finish(0, "stop")]
    tally = check(three, stream=True)
    assert tally.itl_s is not None and tally.itl_s >= 0 and tally.gaps == 2
    assert check(three).itl_s is None  # a whole answer's events come at once: no gap to judge


def stable_record(failure=None, prompt_tokens=40) -> TrackRecord:
    return TrackRecord("stable", 0.0, failure=failure, prompt_tokens=prompt_tokens)


def test_alike_answers_compare_alike():
    events = [TextDelta(0, "hi"), Finish(0, "stop"), Usage(40, 2)]
    candidate = CandidateAnswer(check(events), usage=Usage(41, 7))  # within 5% of the prompt
    comparison = compare(stable_record(), check(events), candidate, tolerance=0.05)
    assert comparison.alike and comparison.differences == ()


def test_each_difference_is_named():
    stable = check(call("get_weather", "{}"), tools=TOOLS)
    candidate = CandidateAnswer(check(call("lookup", "{not json"), tools=TOOLS), usage=Usage(60, 1))
    differences = compare(stable_record(), stable, candidate, tolerance=0.05).differences
    assert differences == (
        "tool_call: names ['get_weather'] != ['lookup']",
        "tool_call: arguments not JSON or no name",
        "usage: prompt_tokens 60 != 40",
    )
    length = CandidateAnswer(check([TextDelta(0, "x"), Finish(0, "length")]))
    assert compare(stable_record(), check([Finish(0, "stop")]), length, 0.05).differences == (
        "finish_reason: stop != length",
    )


def test_a_failure_on_one_side_only_is_no_alike():
    ok = check([Finish(0, "stop")])
    failed = compare(stable_record(), ok, CandidateAnswer(check([]), failure="timeout"), 0.05)
    assert not failed.alike and failed.candidate_failure == "timeout" and failed.differences == ()
    both = compare(stable_record("server_error"), ok, CandidateAnswer(check([]), failure="server_error"), 0.05)
    assert both.alike
