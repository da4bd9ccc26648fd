"""The prefill backlog on hand-built views: the `backlog` scorer alone (the prefill
the request would wait for, its own included, per unit of weight, against the
least on a scale: in [0, 1]), the estimate of what a request adds
(`uncached_tokens`), and the `precise` profile with it: where the prefix matches
tie, the backend with the least prefill ahead wins; a backend holding the whole
prompt keeps it unless the prefill queued there exceeds what the match saves by
nearly the scale."""

from __future__ import annotations

import time

import pytest

from adapters.base import GenerationRequest, LoadSnapshot
from policies import scorers
from policies.profiles import PROFILES, Profile
from policies.routing import route
from policies.saturation import SaturationDetector
from policies.scorers import BACKLOG_SCALE_TOKENS
from policies.views import BackendView, uncached_tokens

DETECTOR = SaturationDetector(queue_depth=5, kv_cache_utilization=0.8)
PROFILE = PROFILES["precise"]
PRECISE = PROFILE.scorers
WITHOUT_BACKLOG = PROFILE.model_copy(update={"scorers": {**PRECISE, "backlog": 0.0}})
S = BACKLOG_SCALE_TOKENS


def test_backlog_scores_the_wait_beyond_the_least_on_a_scale():
    bs = [BackendView("idle"), BackendView("turn", backlog_tokens=55), BackendView("cold", backlog_tokens=552)]
    assert scorers.backlog(bs, DETECTOR) == [1.0, pytest.approx(1 - 55 / S), 0.0]
    # Relative to the least, not to zero: two equally busy backends both score 1.
    busy = [BackendView("a", backlog_tokens=900), BackendView("b", backlog_tokens=900)]
    assert scorers.backlog(busy, DETECTOR) == [1.0, 1.0]
    assert scorers.backlog([BackendView("a"), BackendView("b", backlog_tokens=10**9)], DETECTOR) == [1.0, 0.0]
    assert scorers.backlog([], DETECTOR) == []


def test_the_requests_own_prefill_counts_with_what_is_ahead_of_it():
    # The holder of the prompt computes 40 tokens behind 300; the other all 552 of it, behind nothing.
    bs = [
        BackendView("holder", backlog_tokens=300, prefill_tokens=40),
        BackendView("cold", backlog_tokens=0, prefill_tokens=552),
    ]
    assert scorers.backlog(bs, DETECTOR) == [1.0, pytest.approx(1 - 212 / S)]
    assert scorers.backlog([BackendView("unestimated", backlog_tokens=10)], DETECTOR) == [1.0]


def test_backlog_counts_per_unit_of_weight():
    bs = [BackendView("big", weight=2.0, backlog_tokens=400), BackendView("small", weight=1.0, backlog_tokens=300)]
    assert scorers.backlog(bs, DETECTOR) == [1.0, pytest.approx(1 - 100 / S)]


def test_a_request_adds_its_prompt_less_the_blocks_matched_on_the_backend():
    assert uncached_tokens(552, None, 0, 16) == 552  # no index
    assert uncached_tokens(552, 0.0, 34, 16) == 552  # nothing matched
    assert uncached_tokens(552, 33 / 34, 34, 16) == 552 - 33 * 16
    # An index names a long prompt's head only: the fraction is of the head, not of the prompt.
    assert uncached_tokens(20_000, 1.0, 256, 16) == 20_000 - 4096
    assert uncached_tokens(100, 1.0, 10, 16) == 0  # an estimate below the matched blocks: never negative
    assert uncached_tokens(552, None, 34, 16) == 552  # blocks named, but no index answered
    assert uncached_tokens(40, 1.0, 1, 16) == 24  # a one-block head, matched
    assert uncached_tokens(0, None, 0, 16) == 0  # an empty prompt adds nothing


def view(name: str, backlog: int, precise: float = 0.0, inflight: int = 1, prefill: int = 552) -> BackendView:
    load = LoadSnapshot(waiting=0, running=inflight, kv_usage=0.1, read_at=time.time())
    return BackendView(
        name, inflight=inflight, load=load, prefix_precise=precise, backlog_tokens=backlog, prefill_tokens=prefill
    )


def firsts(profile: Profile, views: list[BackendView], keys: int = 24) -> set[str]:
    req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "x"}])
    return {route(profile, views, req, f"key-{k}", DETECTOR).candidates[0].name for k in range(keys)}


def test_where_the_matches_tie_the_least_prefill_ahead_wins_whatever_the_key():
    # The bench's case: one request in flight on each backend, a cold prompt computing on one.
    views = [view("cold-prefill", 552), view("warm-turn", 55), view("other-turn", 80)]
    assert firsts(PROFILE, views) == {"warm-turn"}
    # Without the scorer every backend looks alike and the key's hash decides.
    assert len(firsts(WITHOUT_BACKLOG, views)) > 1
    # The same with the system prompt held everywhere (equal matches, equal own prefill).
    held = [view("cold-prefill", 552, 0.9, prefill=40), view("warm-turn", 55, 0.9, prefill=40)]
    assert firsts(PROFILE, [*held, view("other-turn", 80, 0.9, prefill=40)]) == {"warm-turn"}


def test_the_backlog_decides_before_the_in_flight_count():
    # Two decoding requests (no prefill ahead) cost a new prompt less than one cold prefill.
    views = [view("prefilling", 552, inflight=1), view("decoding", 0, inflight=2)]
    assert firsts(PROFILE, views) == {"decoding"}


def holder_and_idle(holder_backlog: int) -> list[BackendView]:
    """The prompt (552 tokens) held by one backend (40 to compute there), two idle ones."""
    return [view("holder", holder_backlog, precise=0.93, prefill=40), view("b", 0), view("c", 0)]


def test_a_whole_match_keeps_its_prompt_against_a_smaller_backlog_difference():
    # A few warm turns ahead, or the prompt's own first prefill (552) under way: it stays.
    for backlog in (100, 552, 800):
        assert firsts(PROFILE, holder_and_idle(backlog)) == {"holder"}, backlog


def test_a_holder_whose_queue_outlasts_a_cold_prefill_elsewhere_by_the_scale_loses_the_prompt():
    # Two cold prefills ahead (1,136 tokens + 40 own) against 552 computed at once: 584 more to wait.
    assert firsts(PROFILE, holder_and_idle(1136)) <= {"b", "c"}
    assert firsts(WITHOUT_BACKLOG, holder_and_idle(1136)) == {"holder"}


def test_the_session_still_outweighs_every_other_scorer_together():
    others = sum(w for name, w in PRECISE.items() if name != "session")
    assert PRECISE["backlog"] > 0 and PRECISE["session"] > others
    views = [view("owner", 5000), view("idle", 0)]
    views[0].session_owner = True
    assert firsts(PROFILE, views) == {"owner"}
