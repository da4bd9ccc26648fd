"""The mirror in process (gateway/serving/mirror.py): which stable requests are copied
to the candidate and how the copy is made, the `max_inflight` bound at, below and above
it, the counts of each result, a copy cancelled when its original's client leaves or the
gateway drains, each way a candidate's answer can fail, and the usage tolerance of the
comparison at its boundary. Scripted adapters, no process."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import pytest

from adapters.base import ErrorEvent, Finish, GenerationRequest, Health, TextDelta, Usage
from adapters.errors import FailureKind, GatewayError
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config
from gateway.observe.metrics import GatewayMetrics
from gateway.serving.answer_check import AnswerCheck
from gateway.serving.mirror import CandidateAnswer, Mirror, candidate_answer, compare
from gateway.serving.rollout import RolloutRequest
from policies.rollout_assign import mirrored
from policies.rollout_records import TrackRecord, TrackShares
from tests.gateway.scripted import HANG, ScriptedAdapter, always
from tests.gateway.serving.rollout_kit import Controller

ANSWER = (TextDelta(0, "hi"), Finish(0, "stop"), Usage(40, 2))
ALL = TrackShares(0.5, 1.0)  # every stable request is copied


def backends(candidate: ScriptedAdapter, max_inflight: int = 2, rollout: bool = True, more: int = 0) -> BackendSet:
    """Model `m`: stable `s` and candidate `c` (served by `candidate`), and `more` candidates beside it."""
    stable = {"name": "s", "adapter": "openai", "url": "http://127.0.0.1:9/v1", "track": "stable"}
    model: dict = {"backends": [stable], "max_retries": 0}
    if rollout:
        model["backends"] += [
            {**stable, "name": n, "track": "candidate"} for n in ["c", *(f"c{i}" for i in range(more))]
        ]
        model["rollout"] = {"steps": [0.5, 1.0], "mirror": {"share": 1.0, "max_inflight": max_inflight}}
    models = {"m": model, "plain": {"backends": [{**stable, "name": "p", "track": "stable"}]}}
    backend_set = BackendSet(parse_config({"models": models}))
    if rollout:
        for name in backend_set.backends:
            if name.startswith("c"):
                backend_set.backends[name].adapter = candidate
    return backend_set


def chat(rid: str = "rid-1", model: str = "m") -> GenerationRequest:
    req = GenerationRequest(rid, model, messages=[{"role": "user", "content": "hi"}], stream=True, include_usage=True)
    req.deadline = time.monotonic() + 30
    return req


def rollout_of(req: GenerationRequest, served: str = "stable", assigned: str = "stable", shares=ALL):
    return RolloutRequest(assigned, served, shares, AnswerCheck(req))  # type: ignore[arg-type]


def mirror_of(candidate: ScriptedAdapter, draining=lambda: False, **kw) -> tuple[Mirror, Controller, GatewayMetrics]:
    controller, metrics = Controller(), GatewayMetrics()
    return Mirror(backends(candidate, **kw), controller, metrics, draining), controller, metrics


def counted(metrics: GatewayMetrics, result: str, model: str = "m") -> float:
    labels = {"model": model, "result": result}
    return metrics.registry.get_sample_value("switchyard_rollout_mirror_copies_total", labels) or 0.0


async def settle(mirror: Mirror) -> None:
    while mirror.tasks:
        await asyncio.sleep(0.005)


async def test_a_stable_request_is_copied_as_one_whole_answer_and_compared_once_it_ends():
    candidate = ScriptedAdapter("c", always(*ANSWER))
    mirror, controller, metrics = mirror_of(candidate)
    req = chat()
    req.trace_headers = (("traceparent", "00-x"),)
    rollout = rollout_of(req)
    mirror.offer([req], rollout)
    assert mirror.running == {"m": 1}
    await candidate.called.wait()
    copy = candidate.requests[0]
    assert copy.request_id == "rid-1.mirror" and copy.model == "m"
    assert (copy.stream, copy.include_usage, copy.sampling.n, copy.trace_headers) == (False, False, 1, ())
    assert controller.comparisons == []  # waits for the original's record
    for event in ANSWER:
        rollout.check.saw(event)
    rollout.record(200, None, Usage(40, 2), 0.1, left=False)
    await settle(mirror)
    assert [(model, c.alike, c.differences) for model, c in controller.comparisons] == [("m", True, ())]
    assert mirror.running == {} and counted(metrics, "compared") == 1 and counted(metrics, "dropped") == 0


@pytest.mark.parametrize(
    ("served", "assigned", "shares", "count"),
    [
        ("candidate", "candidate", ALL, 1),  # the candidate answered it: nothing to compare with
        ("stable", "candidate", ALL, 1),  # fell back to stable
        ("stable", "stable", TrackShares(0.5, 0.0), 1),  # no mirror share
        ("stable", "stable", ALL, 2),  # two prompts: not copied
    ],
)
async def test_only_a_lone_stable_request_drawn_for_the_mirror_is_copied(served, assigned, shares, count):
    candidate = ScriptedAdapter("c", always(*ANSWER))
    mirror, _, metrics = mirror_of(candidate)
    req = chat()
    mirror.offer([req] * count, rollout_of(req, served, assigned, shares))
    assert mirror.running == {} and mirror.tasks == set() and candidate.requests == []


async def test_no_copy_while_draining_nor_for_a_model_without_a_rollout_or_a_pool():
    candidate = ScriptedAdapter("c", always(*ANSWER))
    mirror, _, _ = mirror_of(candidate, draining=lambda: True)
    mirror.offer([chat()], rollout_of(chat()))
    assert mirror.tasks == set()
    mirror, _, _ = mirror_of(candidate)
    for model in ("plain", "unknown"):
        mirror.offer([chat(model=model)], rollout_of(chat(model=model)))
    assert mirror.tasks == set() and mirror.running == {}


@pytest.mark.parametrize("bound", [1, 2, 3])
async def test_copies_past_max_inflight_are_dropped_and_counted(bound):
    candidate = ScriptedAdapter("c", always(HANG))
    mirror, _, metrics = mirror_of(candidate, max_inflight=bound)
    rollouts = [rollout_of(chat(f"r{i}")) for i in range(bound + 1)]
    for i, rollout in enumerate(rollouts):
        mirror.offer([chat(f"r{i}")], rollout)
    assert mirror.running == {"m": bound} and len(mirror.tasks) == bound
    assert counted(metrics, "dropped") == 1
    mirror.cancel_all()
    await settle(mirror)
    assert mirror.running == {} and counted(metrics, "cancelled") == bound and counted(metrics, "compared") == 0


async def test_a_copy_is_cancelled_when_its_originals_client_leaves_and_kept_when_it_is_answered():
    candidate = ScriptedAdapter("c", always(HANG))
    mirror, controller, metrics = mirror_of(candidate)
    left, answered = rollout_of(chat("a")), rollout_of(chat("b"))
    mirror.offer([chat("a")], left)
    mirror.offer([chat("b")], answered)
    await asyncio.sleep(0)
    left.record(200, None, None, None, left=True)
    answered.record(200, None, None, None, left=False)
    await asyncio.sleep(0.02)
    assert mirror.running == {"m": 1} and counted(metrics, "cancelled") == 1
    mirror.cancel_all()
    await settle(mirror)
    assert controller.comparisons == [] and counted(metrics, "cancelled") == 2


async def test_a_copy_whose_original_left_after_the_candidate_answered_compares_nothing():
    candidate = ScriptedAdapter("c", always(*ANSWER))
    mirror, controller, metrics = mirror_of(candidate)
    rollout = rollout_of(chat())
    mirror.offer([chat()], rollout)
    await candidate.called.wait()
    await asyncio.sleep(0.01)
    rollout.ended.set_result(None)
    await settle(mirror)
    assert controller.comparisons == [] and counted(metrics, "compared") == 0


@pytest.mark.parametrize("down", ["unhealthy", "ejected"])
async def test_a_copy_with_no_candidate_serving_is_dropped(down):
    candidate = ScriptedAdapter("c", always(*ANSWER))
    mirror, controller, metrics = mirror_of(candidate)
    if down == "unhealthy":
        mirror.backends.backends["c"].health = Health(False, "down")
    else:
        mirror.backends.pools["m"].ejection.admits = lambda name, now=None: False  # type: ignore[method-assign]
    rollout = rollout_of(chat())
    mirror.offer([chat()], rollout)
    await settle(mirror)
    assert candidate.requests == [] and counted(metrics, "dropped") == 1 and mirror.running == {}


async def answer_of(*script: object, timeout_s: float = 30) -> CandidateAnswer:
    set_ = backends(ScriptedAdapter("c", always(*script)))
    backend = set_.backends["c"]
    req = chat()
    req.deadline = time.monotonic() + timeout_s
    answer = await candidate_answer(backend, req)
    assert backend.inflight == 0  # the slot it held is given back however it ended
    return answer


async def test_each_way_a_candidates_answer_ends_is_named():
    good = await answer_of(*ANSWER)
    assert good.failure is None and good.usage == Usage(40, 2) and good.check.finish_reason == "stop"
    timeout = GatewayError(503, "slow", failure=FailureKind.TIMEOUT)
    assert (await answer_of(ErrorEvent(timeout))).failure == "timeout"  # an error as the first event
    failed = GatewayError(502, "cut", failure=FailureKind.SERVER_ERROR)
    assert (await answer_of(TextDelta(0, "a"), ErrorEvent(failed))).failure == "server_error"
    assert (await answer_of(GatewayError(400, "yours"))).failure == "rejected"
    assert (await answer_of()).failure == "server_error"  # ended before saying anything
    assert (await answer_of(HANG, timeout_s=0.05)).failure == "timeout"

    async def bug() -> None:
        raise RuntimeError("a bug")

    assert (await answer_of(bug)).failure == "server_error"


def record(prompt_tokens: int | None, failure: str | None = None) -> TrackRecord:
    return TrackRecord("stable", 0.0, failure=failure, prompt_tokens=prompt_tokens)


def answer(prompt_tokens: int | None, *events) -> tuple[AnswerCheck, CandidateAnswer]:
    check = AnswerCheck(chat())
    for event in events or (Finish(0, "stop"),):
        check.saw(event)
    usage = None if prompt_tokens is None else Usage(prompt_tokens, 1)
    return check, CandidateAnswer(check, usage=usage)


@pytest.mark.parametrize(
    ("ours", "got", "tolerance", "differs"),
    [
        (100, 105, 0.05, False),  # at the tolerance
        (100, 106, 0.05, True),  # above it
        (100, 95, 0.05, False),
        (100, 94, 0.05, True),  # below, by the absolute difference
        (0, 1, 1.0, False),  # no prompt tokens: judged against 1
        (0, 2, 1.0, True),
        (100, None, 0.0, False),  # the candidate said no usage
        (None, 7, 0.0, False),
    ],
)
def test_the_prompt_tokens_differ_only_beyond_the_tolerance(ours, got, tolerance, differs):
    check, candidate = answer(got)
    comparison = compare(record(ours), check, candidate, tolerance)
    assert comparison.differences == ((f"usage: prompt_tokens {got} != {ours}",) if differs else ())


def test_a_structured_answer_the_candidate_got_wrong_is_named_and_the_failures_carried():
    fmt = {"type": "json_object"}
    stable = AnswerCheck(GenerationRequest("r", "m", messages=[], response_format=fmt))
    for event in (TextDelta(0, "{}"), Finish(0, "stop")):
        stable.saw(event)
    theirs = AnswerCheck(GenerationRequest("r", "m", messages=[], response_format=fmt))
    for event in (TextDelta(0, "not json"), Finish(0, "stop")):
        theirs.saw(event)
    comparison = compare(record(None), stable, CandidateAnswer(theirs), 0.0)
    assert comparison.differences == ("structured: not schema-valid",)
    failed = compare(record(None, "timeout"), stable, CandidateAnswer(theirs, failure="overload"), 0.0)
    assert failed.differences == () and (failed.stable_failure, failed.candidate_failure) == ("timeout", "overload")
    before = time.time()
    assert before - 1 <= comparison.at <= time.time()


async def test_the_mirror_draws_each_request_by_its_model_and_id():
    candidate = ScriptedAdapter("c", always(*ANSWER))
    mirror, _, _ = mirror_of(candidate, max_inflight=30)
    half = TrackShares(0.5, 0.5)
    ids = [f"r{i}" for i in range(24)]
    for rid in ids:
        mirror.offer([chat(rid)], rollout_of(chat(rid), shares=half))
    drawn = [rid for rid in ids if mirrored("m", chat(rid), half)]
    assert 0 < len(drawn) < len(ids)
    await asyncio.sleep(0.02)
    assert sorted(r.request_id for r in candidate.requests) == sorted(f"{rid}.mirror" for rid in drawn)
    mirror.cancel_all()
    await settle(mirror)


async def test_a_copy_asks_one_choice_and_turns_the_candidates_ring_not_stables():
    candidate = ScriptedAdapter("c", always(*ANSWER))
    mirror, controller, _ = mirror_of(candidate, more=1)  # two candidates: a ring to turn
    req = chat()
    req.sampling = dataclasses.replace(req.sampling, n=3)
    rollout = rollout_of(req)
    mirror.offer([req], rollout)
    await candidate.called.wait()
    assert candidate.requests[0].sampling.n == 1 and req.sampling.n == 3
    pool = mirror.backends.pools["m"]
    assert pool.candidate_state.turn == 1 and pool.state.turn == 0
    rollout.record(200, None, None, None, left=False)
    await settle(mirror)
    assert len(controller.comparisons) == 1


async def test_a_copy_holds_one_more_slot_of_the_candidate_while_it_runs():
    seen: list[int] = []
    holder: list = []

    async def look() -> None:
        seen.append(holder[0].inflight)

    set_ = backends(ScriptedAdapter("c", always(TextDelta(0, "a"), look, Finish(0, "stop"))))
    backend = set_.backends["c"]
    holder.append(backend)
    backend.inflight = 2  # client requests of its own under way
    await candidate_answer(backend, chat())
    assert seen == [3] and backend.inflight == 2


async def test_the_candidates_first_event_counts_in_its_answer():
    fmt = {"type": "json_object"}
    req = GenerationRequest("r", "m", messages=[], response_format=fmt)
    req.deadline = time.monotonic() + 30
    set_ = backends(ScriptedAdapter("c", always(TextDelta(0, '{"a": '), TextDelta(0, "1}"), Finish(0, "stop"))))
    answer = await candidate_answer(set_.backends["c"], req)
    assert answer.failure is None and answer.check.structured_valid is True


async def test_a_bug_in_a_copy_is_logged_with_the_candidates_name(caplog):
    async def bug() -> None:
        raise RuntimeError("a bug")

    with caplog.at_level(logging.ERROR, logger="switchyard.mirror"):
        answer = await answer_of(bug)
    assert answer.failure == "server_error"
    assert [r.getMessage() for r in caplog.records] == ["a mirror copy to c failed"]
