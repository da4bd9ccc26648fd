"""The record a rollout's request makes of itself when it ends (gateway/serving/rollout.py
`RolloutRequest.record`): every field from the answer's tally and usage, which outcomes
make none (a client's mistake, a client that left), the status boundary between an
answer and an error, and the one result a waiting mirror copy is told."""

from __future__ import annotations

import time

from adapters.base import Finish, GenerationRequest, TextDelta, ToolCallDelta, Usage
from adapters.errors import FailureKind
from gateway.serving.answer_check import AnswerCheck
from gateway.serving.rollout import RolloutRequest
from policies.rollout_records import TrackRecord, TrackShares

TOOLS = [{"type": "function", "function": {"name": "f"}}]
FORMAT = {"type": "json_object"}


def request(assigned: str = "candidate", served: str = "candidate") -> RolloutRequest:
    req = GenerationRequest("r", "m", messages=[], stream=True, tools=TOOLS, response_format=FORMAT)
    check = AnswerCheck(req)
    for event in (
        TextDelta(0, '{"a": '),
        TextDelta(0, "1}"),
        ToolCallDelta(0, 0, name="f", arguments="{}"),
        Finish(0, "tool_calls"),
    ):
        check.saw(event)
    return RolloutRequest(assigned, served, TrackShares(0.5, 0.1), check)  # type: ignore[arg-type]


async def test_a_good_answer_is_recorded_with_its_tally_usage_and_first_token_time():
    rollout = request()
    before = time.time()
    record = rollout.record(200, None, Usage(11, 7), 0.25, left=False)
    assert record is not None
    assert before <= record.at <= time.time()
    assert record == TrackRecord(
        track="candidate",
        at=record.at,
        failure=None,
        ttft_s=0.25,
        itl_s=rollout.check.itl_s,
        finish_reason="tool_calls",
        tool_calls_valid=True,
        structured_valid=True,
        prompt_tokens=11,
        completion_tokens=7,
    )
    assert rollout.check.itl_s is not None  # three output events of a stream: a gap to report
    assert rollout.ended.done() and rollout.ended.result() is record


async def test_the_record_is_of_the_track_that_served_and_without_usage_counts_none():
    rollout = request(assigned="candidate", served="stable")
    assert rollout.fell_back
    record = rollout.record(200, None, None, None, left=False)
    assert record is not None and record.track == "stable"
    assert record.prompt_tokens is None and record.completion_tokens is None and record.ttft_s is None
    assert not request("stable", "stable").fell_back


async def test_an_error_is_recorded_by_its_kind_from_status_400_on():
    assert request().record(400, FailureKind.TIMEOUT, None, None, left=False).failure == "timeout"  # type: ignore[union-attr]
    assert request().record(503, FailureKind.CONNECT, None, None, left=False).failure == "overload"  # type: ignore[union-attr]
    # below 400 the answer is an answer, whatever kind came with it
    assert request().record(399, FailureKind.TIMEOUT, None, None, left=False).failure is None  # type: ignore[union-attr]


async def test_a_clients_mistake_or_a_client_that_left_makes_no_record_and_says_so_once():
    mistake = request()
    assert mistake.record(400, None, Usage(1, 1), 0.1, left=False) is None
    assert mistake.ended.result() is None
    left = request()
    assert left.record(200, None, Usage(1, 1), 0.1, left=True) is None
    assert left.record(500, FailureKind.SERVER_ERROR, None, None, left=True) is None
    assert left.ended.result() is None
    # a second record changes nothing a waiting copy was told
    twice = request()
    first = twice.record(200, None, None, None, left=False)
    assert twice.record(400, None, None, None, left=False) is None
    assert twice.ended.result() is first
