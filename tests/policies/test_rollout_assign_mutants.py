"""What a mutation run of policies/rollout_assign.py left open: the exact point a key
hashes to (SHA-256 of the model and the key, big-endian, any string encodable), the
strict boundaries of the candidate's share and of the mirror's draw, and the key a
request falls back to."""

from __future__ import annotations

import hashlib
import math

from adapters.base import GenerationRequest
from policies.rollout_assign import assignment_key, key_point, mirrored, track_of
from policies.rollout_records import TrackShares


def expected_point(model: str, key: str) -> float:
    digest = hashlib.sha256(f"{model}\x00{key}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / float(1 << 64)


def test_a_key_s_point_is_the_first_8_bytes_of_its_sha256_big_endian():
    assert key_point("m", "s:abc") == expected_point("m", "s:abc")
    assert key_point("m", "\ud800") == expected_point("m", "\ud800")  # a lone surrogate from a client's header


def test_a_key_exactly_at_the_candidate_s_share_is_stable():
    assert track_of(0.25, 0.25) == "stable" and track_of(math.nextafter(0.25, 0), 0.25) == "candidate"


def test_a_request_without_a_sticky_key_is_drawn_by_its_own_id():
    req = GenerationRequest(request_id="rid-1", model="m", tenant="acme")
    assert assignment_key(req, (), ()) == "r:rid-1"
    assert assignment_key(req, ("tenant",), ()) == "t:acme"


def test_the_mirror_draws_on_the_request_s_own_second_hash_strictly_below_its_share():
    req = GenerationRequest(request_id="rid-2", model="m")
    point = expected_point("m", "m:rid-2")
    assert mirrored("m", req, TrackShares(mirror=point)) is False
    assert mirrored("m", req, TrackShares(mirror=math.nextafter(point, 1))) is True
