"""Routing's filters and the plain policies' pickers, each alone on hand-built views (no pipeline)."""

from __future__ import annotations

import time
from collections import Counter

from adapters.base import Capabilities, GenerationRequest, LoadSnapshot, SamplingParams
from policies.filters import (
    CapabilityGap,
    capability_gaps,
    capable,
    forget_stale_load,
    healthy,
    mark_saturation,
    missing_capability,
    saturated_last,
)
from policies.pickers import PICKERS
from policies.profiles import PROFILES
from policies.saturation import SaturationDetector
from policies.views import BackendView
from tests.policies.pickers_alone import picker


def views(*names, **kw):
    return [BackendView(n, **kw) for n in names]


def names(bs):
    return [b.name for b in bs]


# ---- pickers --------------------------------------------------------------------


def test_round_robin_rotates():
    p = picker("round_robin")
    firsts = [p(views("a", "b", "c"), "")[0].name for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]
    assert names(p(views("a", "b", "c"), "")) == ["a", "b", "c"]  # the rest follow in ring order
    assert names(p(views("a", "b", "c"), "")) == ["b", "c", "a"]


def test_policies_leave_saturated_backends_where_their_order_puts_them():
    # Saturated-last is the pipeline's step, applied once; a policy alone does not apply it.
    bs = [BackendView("a", saturated=True), BackendView("b")]
    assert names(picker("round_robin")(bs)) == ["a", "b"]
    assert names(picker("least_loaded")(bs)) == ["a", "b"]
    assert names(picker("weighted")(bs))[0] == "a"


def test_weighted_shares_and_interleaves():
    p = picker("weighted")
    bs = [BackendView("a", weight=2), BackendView("b", weight=1)]
    picks = [p(bs, "")[0].name for _ in range(9)]
    assert Counter(picks) == {"a": 6, "b": 3}
    assert "aaa" not in "".join(picks)  # smooth: no bursts


def test_least_loaded_uses_inflight_and_runtime_queue():
    bs = [
        BackendView("a", inflight=5),
        BackendView("b", inflight=1),
        BackendView("c", inflight=0, load=LoadSnapshot(waiting=10, running=0)),
    ]
    assert names(picker("least_loaded")(bs)) == ["b", "a", "c"]


def test_least_loaded_divides_by_weight():
    bs = [BackendView("small", inflight=2, weight=1), BackendView("big", inflight=3, weight=4)]
    assert names(picker("least_loaded")(bs)) == ["big", "small"]


def test_prefix_affinity_is_sticky_and_spreads_keys():
    p = picker("prefix_affinity")
    bs = views("a", "b", "c")
    for key in ("sys: you are helpful", "other prompt", "third"):
        first = p(bs, key)[0].name
        assert all(p(bs, key)[0].name == first for _ in range(5))
    spread = Counter(p(bs, f"key-{i}")[0].name for i in range(300))
    assert set(spread) == {"a", "b", "c"} and min(spread.values()) > 60


def test_prefix_affinity_moves_only_keys_of_removed_backend():
    p = picker("prefix_affinity")
    keys = [f"k{i}" for i in range(200)]
    before = {k: p(views("a", "b", "c"), k)[0].name for k in keys}
    after = {k: p(views("a", "b"), k)[0].name for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != "c")


def test_prefix_affinity_puts_the_least_loaded_first_when_its_owner_is_saturated():
    p = picker("prefix_affinity")
    bs = [BackendView("a", inflight=3), BackendView("b", inflight=1), BackendView("c", inflight=2)]
    owner = p(bs, "k")[0].name
    marked = [BackendView(b.name, inflight=b.inflight, saturated=b.name == owner) for b in bs]
    others = sorted((b for b in bs if b.name != owner), key=lambda b: b.inflight)
    assert p(marked, "k")[0].name == others[0].name
    # An unsaturated owner keeps the key even when it is the busiest.
    busiest = [BackendView(b.name, inflight=10 if b.name == owner else 0) for b in bs]
    assert p(busiest, "k")[0].name == owner


def test_each_plain_policy_is_a_profile_of_its_own_picker_and_no_scorer():
    for name in ("round_robin", "weighted", "least_loaded", "prefix_affinity"):
        assert PROFILES[name].picker == name and PROFILES[name].scorers == {}
        assert PICKERS[name].__name__ == name


# ---- filters ---------------------------------------------------------------------


def test_unhealthy_filtered_unless_all_unhealthy():
    bs = [BackendView("a", healthy=False), BackendView("b")]
    assert names(healthy(bs)) == ["b"]
    bs = [BackendView("a", healthy=False), BackendView("b", healthy=False)]
    assert names(healthy(bs)) == ["a", "b"]


def test_missing_capability_names_the_feature_a_request_needs():
    none = Capabilities(tools=False, logprobs=False, structured_output=False, completions=False, n=False)
    chat = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
    assert missing_capability(none, chat) is None  # a plain chat needs nothing optional
    assert missing_capability(none, GenerationRequest("r", "m", kind="completion", prompt="x")) == (
        "legacy completions (/v1/completions)"
    )
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert missing_capability(none, GenerationRequest("r", "m", tools=tools)) == "tool calls"
    assert missing_capability(none, GenerationRequest("r", "m", tools=tools, tool_choice="none")) is None
    assert missing_capability(none, GenerationRequest("r", "m", sampling=SamplingParams(logprobs=True))) == "logprobs"
    assert missing_capability(none, GenerationRequest("r", "m", response_format={"type": "json_object"})) == (
        "structured output (response_format)"
    )
    assert missing_capability(none, GenerationRequest("r", "m", sampling=SamplingParams(n=4))) is None  # emulated
    assert missing_capability(Capabilities(), GenerationRequest("r", "m", kind="completion", prompt="x")) is None


def test_capability_filter_keeps_the_capable_and_says_why_of_the_rest():
    bs = [
        BackendView("v", adapter="vllm"),
        BackendView("t", adapter="tgi", capabilities=Capabilities(completions=False)),
    ]
    req = GenerationRequest("r", "m", kind="completion", prompt="x")
    assert names(capable(bs, req)) == ["v"]
    assert capability_gaps(bs, req) == [CapabilityGap("t", "tgi", "legacy completions (/v1/completions)")]
    assert str(capability_gaps(bs, req)[0]) == "t (tgi) does not support legacy completions (/v1/completions)"


def test_forget_stale_load_drops_only_old_snapshots():
    now = time.time()
    detector = SaturationDetector(max_load_age_s=5.0)
    fresh = LoadSnapshot(waiting=1, read_at=now - 4.9)
    stale = LoadSnapshot(waiting=1, read_at=now - 5.1)
    bs = [BackendView("f", load=fresh), BackendView("s", load=stale), BackendView("n")]
    assert [b.load for b in forget_stale_load(bs, detector, now)] == [fresh, None, None]


def test_mark_saturation_follows_the_detector_and_overrides_a_given_flag():
    detector = SaturationDetector(queue_depth=5, kv_cache_utilization=0.8)
    bs = [
        BackendView("full", inflight=2, max_inflight=2),
        BackendView("queue", load=LoadSnapshot(waiting=5)),
        BackendView("kv", load=LoadSnapshot(kv_usage=0.8)),
        BackendView("calm", inflight=1, max_inflight=2, load=LoadSnapshot(waiting=4, kv_usage=0.79), saturated=True),
    ]
    assert [b.saturated for b in mark_saturation(bs, detector)] == [True, True, True, False]


def test_saturated_last_is_a_stable_partition():
    bs = [
        BackendView("s1", saturated=True),
        BackendView("a"),
        BackendView("s2", saturated=True),
        BackendView("b"),
    ]
    assert names(saturated_last(bs)) == ["a", "b", "s1", "s2"]
