"""Routing policies as pure functions."""

from __future__ import annotations

from collections import Counter

from adapters.base import LoadSnapshot
from policies.routing import BackendView, LeastLoaded, PrefixAffinity, RoundRobin, Weighted, route


def views(*names, **kw):
    return [BackendView(n, **kw) for n in names]


def test_round_robin_rotates():
    p = RoundRobin()
    firsts = [route(p, views("a", "b", "c"), "")[0].name for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]


def test_weighted_shares_and_interleaves():
    p = Weighted()
    bs = [BackendView("a", weight=2), BackendView("b", weight=1)]
    picks = [route(p, bs, "")[0].name for _ in range(9)]
    assert Counter(picks) == {"a": 6, "b": 3}
    assert "aaa" not in "".join(picks)  # smooth: no bursts


def test_least_loaded_uses_inflight_and_runtime_queue():
    bs = [
        BackendView("a", inflight=5),
        BackendView("b", inflight=1),
        BackendView("c", inflight=0, load=LoadSnapshot(waiting=10, running=0)),
    ]
    assert [b.name for b in route(LeastLoaded(), bs, "")] == ["b", "a", "c"]


def test_unhealthy_filtered_unless_all_unhealthy():
    bs = [BackendView("a", healthy=False), BackendView("b")]
    assert [b.name for b in route(LeastLoaded(), bs, "")] == ["b"]
    bs = [BackendView("a", healthy=False), BackendView("b", healthy=False)]
    assert len(route(LeastLoaded(), bs, "")) == 2


def test_saturated_backends_go_last():
    bs = [BackendView("a", inflight=4, max_inflight=4), BackendView("b", inflight=9)]
    assert [b.name for b in route(RoundRobin(), bs, "")] == ["b", "a"]
    bs = [BackendView("a", load=LoadSnapshot(kv_usage=0.99)), BackendView("b", inflight=3)]
    assert route(LeastLoaded(), bs, "")[0].name == "b"


def test_prefix_affinity_is_sticky_and_spreads_keys():
    p = PrefixAffinity()
    bs = views("a", "b", "c")
    for key in ("sys: you are helpful", "other prompt", "third"):
        first = route(p, bs, key)[0].name
        assert all(route(p, bs, key)[0].name == first for _ in range(5))
    spread = Counter(route(p, bs, f"key-{i}")[0].name for i in range(300))
    assert set(spread) == {"a", "b", "c"} and min(spread.values()) > 60


def test_prefix_affinity_moves_only_keys_of_removed_backend():
    p = PrefixAffinity()
    keys = [f"k{i}" for i in range(200)]
    before = {k: route(p, views("a", "b", "c"), k)[0].name for k in keys}
    after = {k: route(p, views("a", "b"), k)[0].name for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != "c")


def test_prefix_affinity_avoids_saturated_owner():
    p = PrefixAffinity()
    bs = views("a", "b")
    owner = route(p, bs, "k")[0].name
    sat = [BackendView(b.name, inflight=2 if b.name == owner else 0, max_inflight=2) for b in bs]
    assert route(p, sat, "k")[0].name != owner
