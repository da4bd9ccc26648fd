"""A rollout's assignment (policies/rollout_assign.py): sticky per session or tenant,
monotone in the share (a key only ever moves stable -> candidate as the share grows),
accurate in the share over many keys, and the mirror's draw independent of it."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from adapters.base import GenerationRequest
from policies.rollout_assign import assign, assignment_key, key_point, mirrored, track_of
from policies.rollout_records import TrackShares
from policies.session import SESSION_SOURCES

SOURCES = list(SESSION_SOURCES)
shares = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
names = st.text(min_size=1, max_size=40)


def request(rid: str = "r", tenant: str | None = "t", session: str | None = None) -> GenerationRequest:
    keys = {"x-session-id": session} if session is not None else {}
    return GenerationRequest(rid, "m", messages=[], tenant=tenant, session_keys=keys)


@given(names, shares, shares)
def test_raising_the_share_only_moves_keys_to_the_candidate(key, a, b):
    low, high = sorted((a, b))
    point = key_point("m", key)
    assert 0.0 <= point < 1.0
    if track_of(point, low) == "candidate":
        assert track_of(point, high) == "candidate"


@given(names, names, shares)
def test_a_session_keeps_its_track_whatever_request_carries_it(session, other_rid, share):
    shares_now = TrackShares(share)
    first = assign("m", request("r1", session=session), shares_now, ["session"], SOURCES)
    again = assign("m", request(other_rid, session=session), shares_now, ["session"], SOURCES)
    assert first == again


def test_a_session_never_flips_back_while_the_steps_climb():
    steps = [0.01, 0.05, 0.25, 0.5, 1.0]
    for i in range(2000):
        req = request(f"r{i}", session=f"conversation-{i}")
        tracks = [assign("m", req, TrackShares(s), ["session"], SOURCES) for s in steps]
        first_candidate = tracks.index("candidate")  # at 1.0 at the latest
        assert all(t == "stable" for t in tracks[:first_candidate])
        assert all(t == "candidate" for t in tracks[first_candidate:])


def test_the_candidate_serves_its_share_of_keys_within_a_binomial_bound():
    keys, share = 20_000, 0.25
    served = sum(
        assign("m", request(f"r{i}", session=f"s{i}"), TrackShares(share), ["session"], SOURCES) == "candidate"
        for i in range(keys)
    )
    sd = math.sqrt(keys * share * (1 - share))
    assert abs(served - keys * share) < 5 * sd, served


def test_the_shares_edges_are_exact():
    req = request(session="s")
    assert assign("m", req, TrackShares(0.0), ["session"], SOURCES) == "stable"
    assert assign("m", req, TrackShares(1.0), ["session"], SOURCES) == "candidate"


def test_sticky_by_tenant_keeps_a_tenant_without_sessions_on_one_track():
    tracks = {assign("m", request(f"r{i}", tenant="acme"), TrackShares(0.5), ["tenant"], SOURCES) for i in range(200)}
    assert len(tracks) == 1
    # and a session, when sticky names it first, takes precedence over the tenant
    key = assignment_key(request(session="s"), ["session", "tenant"], SOURCES)
    assert key.startswith("s:")
    assert assignment_key(request(), ["session", "tenant"], SOURCES) == "t:t"


def test_without_a_sticky_key_each_request_is_drawn_on_its_own():
    tracks = [assign("m", request(f"r{i}", tenant=None), TrackShares(0.5), ["session"], SOURCES) for i in range(400)]
    assert 100 < tracks.count("candidate") < 300


def test_the_key_is_the_sessions_digest_never_the_clients_name():
    name = "u" * 100_000
    key = assignment_key(request(session=name), ["session"], SOURCES)
    assert name not in key and len(key) == 2 + 32


def test_another_tenant_reusing_a_session_name_is_assigned_on_its_own():
    share = TrackShares(0.5)
    differs = sum(
        assign("m", request(tenant="a", session=f"s{i}"), share, ["session"], SOURCES)
        != assign("m", request(tenant="b", session=f"s{i}"), share, ["session"], SOURCES)
        for i in range(400)
    )
    assert differs > 100  # independent draws: about half differ


def test_models_rolled_out_at_once_draw_their_candidates_independently():
    share = TrackShares(0.5)
    differs = sum(
        assign("m1", request(session=f"s{i}"), share, ["session"], SOURCES)
        != assign("m2", request(session=f"s{i}"), share, ["session"], SOURCES)
        for i in range(400)
    )
    assert differs > 100


def test_the_mirror_samples_requests_at_its_share_independently_of_the_assignment():
    share = TrackShares(0.0, 0.3)
    draws = [mirrored("m", request(f"r{i}"), share) for i in range(10_000)]
    assert abs(sum(draws) - 3000) < 5 * math.sqrt(10_000 * 0.3 * 0.7)
    assert not any(mirrored("m", request(f"r{i}"), TrackShares(0.5, 0.0)) for i in range(100))
    assert all(mirrored("m", request(f"r{i}"), TrackShares(0.0, 1.0)) for i in range(100))
    # the mirror draw is not the assignment draw: mirrored requests are not all low points
    both = TrackShares(0.3, 0.3)
    tracks = [
        assign("m", request(f"r{i}", tenant=None), both, [], SOURCES)
        for i in range(2000)
        if mirrored("m", request(f"r{i}", tenant=None), both)
    ]
    assert 0.15 < tracks.count("candidate") / len(tracks) < 0.45
