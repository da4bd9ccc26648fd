"""The routing pipeline end to end on hand-built views: filters, the policy's order,
saturated last (once), stale load ignored, capability reasons."""

from __future__ import annotations

import time
from collections import Counter

from adapters.base import Capabilities, GenerationRequest, LoadSnapshot
from policies.routing import (
    BackendView,
    CapabilityGap,
    LeastLoaded,
    PrefixAffinity,
    RoundRobin,
    Weighted,
    prefix_key,
    route,
)
from policies.saturation import SaturationDetector


def chat(text: str = "hello") -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": text}])


def views(*names, **kw):
    return [BackendView(n, **kw) for n in names]


def names(result):
    return [b.name for b in result.candidates]


class Recording:
    """A policy that keeps the given order and remembers what it was given."""

    def __init__(self) -> None:
        self.given: list[BackendView] = []

    def order(self, backends: list[BackendView], key: str) -> list[BackendView]:
        self.given = list(backends)
        return list(backends)


def test_round_robin_rotates_through_the_pipeline():
    p = RoundRobin()
    firsts = [route(p, views("a", "b", "c"), chat()).candidates[0].name for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]


def test_weighted_shares_through_the_pipeline():
    p = Weighted()
    bs = [BackendView("a", weight=2), BackendView("b", weight=1)]
    picks = [route(p, bs, chat()).candidates[0].name for _ in range(9)]
    assert Counter(picks) == {"a": 6, "b": 3}


def test_unhealthy_filtered_unless_all_unhealthy():
    bs = [BackendView("a", healthy=False), BackendView("b")]
    assert names(route(LeastLoaded(), bs, chat())) == ["b"]
    bs = [BackendView("a", healthy=False), BackendView("b", healthy=False)]
    assert len(route(LeastLoaded(), bs, chat()).candidates) == 2


def test_saturated_backends_go_last():
    bs = [BackendView("a", inflight=4, max_inflight=4), BackendView("b", inflight=9)]
    assert names(route(RoundRobin(), bs, chat())) == ["b", "a"]
    bs = [BackendView("a", load=LoadSnapshot(kv_usage=0.99)), BackendView("b", inflight=3)]
    assert route(LeastLoaded(), bs, chat()).candidates[0].name == "b"


def test_saturation_reaches_the_policy_marked_and_is_applied_once_after_it():
    detector = SaturationDetector()
    bs = [
        BackendView("s1", load=LoadSnapshot(waiting=9)),
        BackendView("a"),
        BackendView("s2", inflight=1, max_inflight=1),
        BackendView("b"),
    ]
    policy = Recording()
    result = route(policy, bs, chat(), detector)
    assert [(b.name, b.saturated) for b in policy.given] == [("s1", True), ("a", False), ("s2", True), ("b", False)]
    assert names(result) == ["a", "b", "s1", "s2"]  # saturated last, each group in the policy's order


def test_a_runtime_reporting_saturation_goes_last_under_the_one_definition():
    # 85% KV or 6 waiting: saturated for admission, so routing avoids it too.
    for load in (LoadSnapshot(kv_usage=0.85), LoadSnapshot(waiting=6)):
        bs = [BackendView("a", load=load), BackendView("b", inflight=3)]
        assert names(route(RoundRobin(), bs, chat())) == ["b", "a"]


def test_stale_load_is_ignored_by_saturation_and_by_the_policy():
    now = time.time()
    stale = LoadSnapshot(waiting=50, kv_usage=0.99, read_at=now - 60)
    bs = [BackendView("a", inflight=1, load=stale), BackendView("b", inflight=2)]
    policy = Recording()
    result = route(policy, bs, chat(), SaturationDetector(max_load_age_s=5), now)
    assert [b.load for b in policy.given] == [None, None]
    assert names(result) == ["a", "b"]  # not pushed last by a reading nobody trusts
    assert names(route(LeastLoaded(), bs, chat(), now=now)) == ["a", "b"]  # its 50 waiting no longer count
    fresh = LoadSnapshot(waiting=50, kv_usage=0.99, read_at=now - 1)
    bs = [BackendView("a", inflight=1, load=fresh), BackendView("b", inflight=2)]
    assert names(route(LeastLoaded(), bs, chat(), now=now)) == ["b", "a"]


def test_stale_load_leaves_max_inflight_to_decide():
    now = time.time()
    stale = LoadSnapshot(kv_usage=0.1, read_at=now - 60)
    bs = [BackendView("a", inflight=2, max_inflight=2, load=stale), BackendView("b", inflight=5)]
    assert names(route(RoundRobin(), bs, chat(), now=now)) == ["b", "a"]


def test_prefix_affinity_avoids_saturated_owner():
    p = PrefixAffinity()
    bs = views("a", "b")
    owner = route(p, bs, chat("k")).candidates[0].name
    sat = [BackendView(b.name, inflight=2 if b.name == owner else 0, max_inflight=2) for b in bs]
    assert route(p, sat, chat("k")).candidates[0].name != owner


def test_prefix_affinity_keys_on_the_start_of_the_conversation():
    p = PrefixAffinity()
    bs = views("a", "b", "c")
    req = chat("you are a helpful assistant")
    assert route(p, bs, req).candidates[0].name == p.order(bs, prefix_key(req.messages, req.prompt))[0].name
    picks = Counter(route(p, bs, chat(f"conversation {i}")).candidates[0].name for i in range(90))
    assert set(picks) == {"a", "b", "c"}


def test_capability_filter_runs_before_the_policy():
    bs = [
        BackendView("t", adapter="tgi", capabilities=Capabilities(completions=False)),
        BackendView("v", adapter="vllm"),
    ]
    req = GenerationRequest("r", "m", kind="completion", prompt="x")
    policy = Recording()
    result = route(policy, bs, req)
    assert [b.name for b in policy.given] == ["v"]
    assert names(result) == ["v"] and not result.unsupported
    assert result.refused == [CapabilityGap("t", "tgi", "legacy completions (/v1/completions)")]


def test_when_no_backend_is_capable_the_result_says_why():
    bs = [
        BackendView("t", adapter="tgi", capabilities=Capabilities(tools=False)),
        BackendView("x", adapter="trtllm", capabilities=Capabilities(tools=False)),
    ]
    req = GenerationRequest("r", "m", tools=[{"type": "function", "function": {"name": "f"}}])
    result = route(RoundRobin(), bs, req)
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
    result = route(RoundRobin(), bs, req)
    assert names(result) == ["v"] and not result.unsupported
