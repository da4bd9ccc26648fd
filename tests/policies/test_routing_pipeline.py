"""The routing pipeline end to end on hand-built views, under the plain profiles:
filters, the picker's order, saturated last (once), stale load ignored, capability
reasons."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from adapters.base import Capabilities, GenerationRequest, LoadSnapshot
from policies.filters import CapabilityGap
from policies.pickers import PICKERS, Decision, RouteState
from policies.profiles import PROFILES
from policies.routing import prefix_key, route
from policies.saturation import SaturationDetector
from policies.views import BackendView

ROUND_ROBIN, WEIGHTED = PROFILES["round_robin"], PROFILES["weighted"]
LEAST_LOADED, PREFIX_AFFINITY = PROFILES["least_loaded"], PROFILES["prefix_affinity"]


def chat(text: str = "hello") -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": text}])


def views(*names, **kw):
    return [BackendView(n, **kw) for n in names]


def names(result):
    return [b.name for b in result.candidates]


class Recording:
    """A picker that keeps the given order and remembers what it was given."""

    def __init__(self) -> None:
        self.given: list[BackendView] = []

    def __call__(self, backends: list[BackendView], totals: list[float], d: Decision) -> list[BackendView]:
        self.given = list(backends)
        return list(backends)


@pytest.fixture
def recording(monkeypatch) -> Recording:
    """The round robin profile's picker, recording instead of rotating."""
    policy = Recording()
    monkeypatch.setitem(PICKERS, "round_robin", policy)
    return policy


def test_round_robin_rotates_through_the_pipeline():
    state = RouteState()
    firsts = [route(ROUND_ROBIN, views("a", "b", "c"), chat(), state=state).candidates[0].name for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]


def test_weighted_shares_through_the_pipeline():
    state = RouteState()
    bs = [BackendView("a", weight=2), BackendView("b", weight=1)]
    picks = [route(WEIGHTED, bs, chat(), state=state).candidates[0].name for _ in range(9)]
    assert Counter(picks) == {"a": 6, "b": 3}


def test_unhealthy_filtered_unless_all_unhealthy():
    bs = [BackendView("a", healthy=False), BackendView("b")]
    assert names(route(LEAST_LOADED, bs, chat())) == ["b"]
    bs = [BackendView("a", healthy=False), BackendView("b", healthy=False)]
    assert len(route(LEAST_LOADED, bs, chat()).candidates) == 2


def test_saturated_backends_go_last():
    bs = [BackendView("a", inflight=4, max_inflight=4), BackendView("b", inflight=9)]
    assert names(route(ROUND_ROBIN, bs, chat())) == ["b", "a"]
    bs = [BackendView("a", load=LoadSnapshot(kv_usage=0.99)), BackendView("b", inflight=3)]
    assert route(LEAST_LOADED, bs, chat()).candidates[0].name == "b"


def test_saturation_reaches_the_picker_marked_and_is_applied_once_after_it(recording):
    detector = SaturationDetector()
    bs = [
        BackendView("s1", load=LoadSnapshot(waiting=9)),
        BackendView("a"),
        BackendView("s2", inflight=1, max_inflight=1),
        BackendView("b"),
    ]
    result = route(ROUND_ROBIN, bs, chat(), detector=detector)
    assert [(b.name, b.saturated) for b in recording.given] == [("s1", True), ("a", False), ("s2", True), ("b", False)]
    assert names(result) == ["a", "b", "s1", "s2"]  # saturated last, each group in the picker's order


def test_a_runtime_reporting_saturation_goes_last_under_the_one_definition():
    # 85% KV or 6 waiting: saturated for admission, so routing avoids it too.
    for load in (LoadSnapshot(kv_usage=0.85), LoadSnapshot(waiting=6)):
        bs = [BackendView("a", load=load), BackendView("b", inflight=3)]
        assert names(route(ROUND_ROBIN, bs, chat())) == ["b", "a"]


def test_stale_load_is_ignored_by_saturation_and_by_the_picker(recording):
    now = time.time()
    stale = LoadSnapshot(waiting=50, kv_usage=0.99, read_at=now - 60)
    bs = [BackendView("a", inflight=1, load=stale), BackendView("b", inflight=2)]
    result = route(ROUND_ROBIN, bs, chat(), detector=SaturationDetector(max_load_age_s=5), now=now)
    assert [b.load for b in recording.given] == [None, None]
    assert names(result) == ["a", "b"]  # not pushed last by a reading nobody trusts
    assert names(route(LEAST_LOADED, bs, chat(), now=now)) == ["a", "b"]  # its 50 waiting no longer count
    fresh = LoadSnapshot(waiting=50, kv_usage=0.99, read_at=now - 1)
    bs = [BackendView("a", inflight=1, load=fresh), BackendView("b", inflight=2)]
    assert names(route(LEAST_LOADED, bs, chat(), now=now)) == ["b", "a"]


def test_stale_load_leaves_max_inflight_to_decide():
    now = time.time()
    stale = LoadSnapshot(kv_usage=0.1, read_at=now - 60)
    bs = [BackendView("a", inflight=2, max_inflight=2, load=stale), BackendView("b", inflight=5)]
    assert names(route(ROUND_ROBIN, bs, chat(), now=now)) == ["b", "a"]


def test_prefix_affinity_avoids_saturated_owner():
    bs = views("a", "b")
    owner = route(PREFIX_AFFINITY, bs, chat("k")).candidates[0].name
    sat = [BackendView(b.name, inflight=2 if b.name == owner else 0, max_inflight=2) for b in bs]
    assert route(PREFIX_AFFINITY, sat, chat("k")).candidates[0].name != owner


def test_prefix_affinity_keys_on_the_start_of_the_conversation():
    bs = views("a", "b", "c")
    req = chat("you are a helpful assistant")
    alone = PICKERS["prefix_affinity"](
        bs, [], Decision(prefix_key(req.messages, req.prompt), PREFIX_AFFINITY, RouteState())
    )
    assert route(PREFIX_AFFINITY, bs, req).candidates[0].name == alone[0].name
    picks = Counter(route(PREFIX_AFFINITY, bs, chat(f"conversation {i}")).candidates[0].name for i in range(90))
    assert set(picks) == {"a", "b", "c"}


def test_capability_filter_runs_before_the_picker(recording):
    bs = [
        BackendView("t", adapter="tgi", capabilities=Capabilities(completions=False)),
        BackendView("v", adapter="vllm"),
        BackendView("w", adapter="vllm"),
    ]
    req = GenerationRequest("r", "m", kind="completion", prompt="x")
    result = route(ROUND_ROBIN, bs, req)
    assert [b.name for b in recording.given] == ["v", "w"]
    assert names(result) == ["v", "w"] and not result.unsupported
    assert result.refused == [CapabilityGap("t", "tgi", "legacy completions (/v1/completions)")]


def test_when_no_backend_is_capable_the_result_says_why():
    bs = [
        BackendView("t", adapter="tgi", capabilities=Capabilities(tools=False)),
        BackendView("x", adapter="trtllm", capabilities=Capabilities(tools=False)),
    ]
    req = GenerationRequest("r", "m", tools=[{"type": "function", "function": {"name": "f"}}])
    result = route(ROUND_ROBIN, bs, req)
    assert result.candidates == [] and result.unsupported
    assert [str(g) for g in result.refused] == [
        "t (tgi) does not support tool calls",
        "x (trtllm) does not support tool calls",
    ]


def test_an_unhealthy_capable_backend_is_still_a_candidate_when_it_is_the_only_one():
    bs = [
        BackendView("t", adapter="tgi", capabilities=Capabilities(logprobs=False)),
        BackendView("v", adapter="vllm", healthy=False),
    ]
    req = chat()
    req.sampling.logprobs = True
    result = route(ROUND_ROBIN, bs, req)
    assert names(result) == ["v"] and not result.unsupported


def test_with_one_candidate_nothing_is_picked_or_scored():
    # Nothing to choose between: the rotating picker is not asked, so its ring does not turn.
    bs = [BackendView("a"), BackendView("b", healthy=False)]
    state = RouteState()
    result = route(PROFILES["blended"], bs, chat("x"), state=state)
    assert names(result) == ["a"] and result.scores == {}
    route(ROUND_ROBIN, bs, chat("x"), state=state)
    assert state.turn == 0
