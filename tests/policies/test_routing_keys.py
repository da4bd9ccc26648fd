"""Routing's details that the picker tests pass over: the prefix key's exact text,
the load score's arithmetic, weighted shares of rendezvous hashing, the failover
order of weighted round robin, and the pipeline reading its own clock (`now`)
rather than the wall clock."""

from __future__ import annotations

import time
from collections import Counter

from adapters.base import GenerationRequest, LoadSnapshot
from policies.filters import forget_stale_load, mark_saturation
from policies.pickers import load_score, rendezvous_score
from policies.profiles import PROFILES
from policies.routing import prefix_key, route
from policies.saturation import SaturationDetector
from policies.views import BackendView
from tests.policies.pickers_alone import picker


def names(bs):
    return [b.name for b in bs]


# ---- prefix_key ---------------------------------------------------------------------


def test_prefix_key_renders_each_role_with_its_text():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert prefix_key(msgs, None) == "system:be brief\nuser:hi"
    # The role is part of the key: the same words said by another role are another prompt.
    assert prefix_key([{"role": "user", "content": "be brief"}], None) != prefix_key(
        [{"role": "system", "content": "be brief"}], None
    )


def test_prefix_key_keeps_structured_content():
    # Content parts (images, text parts) are rendered, not dropped: two different
    # multimodal prompts must not share one key.
    one = [{"role": "user", "content": [{"type": "text", "text": "cats"}]}]
    two = [{"role": "user", "content": [{"type": "text", "text": "dogs"}]}]
    assert prefix_key(one, None) != prefix_key(two, None)
    assert "cats" in prefix_key(one, None)


def test_prefix_key_is_cut_at_its_length():
    long = "x" * 2000
    assert prefix_key(None, long) == long[:512]
    assert prefix_key(None, long, chars=10) == "x" * 10
    msgs = [{"role": "user", "content": long}, {"role": "assistant", "content": "tail"}]
    key = prefix_key(msgs, None)
    assert key == ("user:" + long)[:512]
    # Many short messages: the key is the start of all of them, still cut to length.
    many = [{"role": "user", "content": f"m{i}"} for i in range(400)]
    assert prefix_key(many, None) == "\n".join(f"user:m{i}" for i in range(400))[:512]


def test_prefix_key_of_token_ids_and_of_nothing():
    tokens = list(range(300))
    assert prefix_key(None, tokens) == ",".join(str(t) for t in range(128))  # 512 // 4 ids
    assert prefix_key(None, tokens, chars=40) == ",".join(str(t) for t in range(10))
    assert prefix_key(None, None) == ""
    assert prefix_key([], "text") == "text"  # no messages: the prompt decides


# ---- load_score -------------------------------------------------------------------


def test_load_score_counts_running_once_and_queued_twice_per_weight():
    assert load_score(BackendView("a")) == 0
    assert load_score(BackendView("a", inflight=3, weight=2)) == -1.5
    # The runtime's running count replaces ours when larger; each waiting request counts double.
    assert load_score(BackendView("a", inflight=1, load=LoadSnapshot(waiting=2, running=4))) == -(4 + 2 * 2)
    assert load_score(BackendView("a", inflight=5, load=LoadSnapshot(waiting=1, running=2), weight=4)) == -7 / 4
    # Unknown fields count as nothing, not as one.
    assert load_score(BackendView("a", load=LoadSnapshot())) == 0
    assert load_score(BackendView("a", inflight=2, load=LoadSnapshot(running=None, waiting=3))) == -(2 + 6)


# ---- rendezvous hashing ------------------------------------------------------------


def test_rendezvous_scores_are_positive():
    for i in range(50):
        assert rendezvous_score(f"k{i}", BackendView("a", weight=0.5)) > 0


def test_prefix_affinity_shares_keys_in_proportion_to_weight():
    # Weighted rendezvous: a backend of weight 4 beside four of weight 1 owns half of
    # the keys (4 / 8), each light one an eighth.
    p = picker("prefix_affinity")
    bs = [BackendView("heavy", weight=4)] + [BackendView(f"l{i}", weight=1) for i in range(4)]
    picks = Counter(p(bs, f"key-{i}")[0].name for i in range(4000))
    assert 0.46 < picks["heavy"] / 4000 < 0.54, picks
    assert all(0.1 < picks[f"l{i}"] / 4000 < 0.15 for i in range(4)), picks
    # Two backends, 1 against 3: a quarter and three quarters.
    two = [BackendView("one", weight=1), BackendView("three", weight=3)]
    share = Counter(p(two, f"key-{i}")[0].name for i in range(4000))["three"] / 4000
    assert 0.72 < share < 0.78


# ---- weighted round robin ------------------------------------------------------------


def test_weighted_failover_order_follows_the_running_counts():
    p = picker("weighted")
    bs = [BackendView("a", weight=1), BackendView("b", weight=3), BackendView("c", weight=2)]
    # First pick: counts a=1, b=3, c=2; b is chosen (and pays the total), then c, then a.
    assert names(p(bs, "")) == ["b", "c", "a"]
    # Second: a=2, b=0, c=4: c, then a, then b.
    assert names(p(bs, "")) == ["c", "a", "b"]


def test_weighted_backend_that_joins_starts_level_with_the_others():
    p = picker("weighted")
    two = [BackendView("a"), BackendView("b")]
    assert [p(two, "")[0].name for _ in range(2)] == ["a", "b"]
    # The counts are level again; a newcomer does not jump the line.
    three = [*two, BackendView("c")]
    assert [p(three, "")[0].name for _ in range(3)] == ["a", "b", "c"]


# ---- the pipeline's clock -------------------------------------------------------------


def test_the_steps_judge_freshness_by_the_given_clock():
    # A clock far from the wall clock: only the `now` given can make this load fresh.
    now = 1000.0
    detector = SaturationDetector(max_load_age_s=5.0)
    busy = LoadSnapshot(waiting=9, read_at=999.0)
    bs = [BackendView("a", load=busy), BackendView("b")]
    assert [b.load for b in forget_stale_load(bs, detector, now)] == [busy, None]
    assert [b.saturated for b in mark_saturation(bs, detector, now)] == [True, False]
    # And a load fresh by the wall clock is old by a clock a minute ahead.
    wall = LoadSnapshot(waiting=9, read_at=time.time())
    assert forget_stale_load([BackendView("a", load=wall)], detector, time.time() + 60)[0].load is None


def test_route_passes_its_clock_to_the_stale_and_saturation_steps():
    req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
    bs = [BackendView("a", load=LoadSnapshot(waiting=9, read_at=999.0)), BackendView("b")]
    result = route(PROFILES["round_robin"], bs, req, detector=SaturationDetector(), now=1000.0)
    assert names(result.candidates) == ["b", "a"]  # a's queue counts: fresh at 1000
    assert result.candidates[1].load is not None and result.candidates[1].saturated


def test_mark_saturation_passes_an_unchanged_view_on_as_is():
    # One view per backend per decision: a view whose verdict stands is not copied.
    calm, busy = BackendView("calm"), BackendView("busy", inflight=2, max_inflight=2)
    marked = mark_saturation([calm, busy], SaturationDetector())
    assert marked[0] is calm and marked[1] is not busy and marked[1].saturated


def test_route_keys_a_completion_on_its_prompt():
    bs = [BackendView("a"), BackendView("b"), BackendView("c")]

    def first(prompt):
        return (
            route(PROFILES["prefix_affinity"], bs, GenerationRequest("r", "m", kind="completion", prompt=prompt))
            .candidates[0]
            .name
        )

    picks = Counter(first(f"prompt number {i}") for i in range(60))
    assert set(picks) == {"a", "b", "c"}  # distinct prompts spread; they are not one key
    assert first("same prompt") == first("same prompt")
