"""Session affinity at its edges: keys without a tenant, the table's documented
defaults (30 minutes, 100 000 keys), the ttl boundary, and the refused sizes."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest
from policies.session import ENTRY_OVERHEAD_BYTES, SessionAffinity, SessionTable, session_key


def test_a_request_without_a_tenant_keys_its_session_by_the_value_alone():
    anonymous = GenerationRequest("r", "m", messages=[], tenant=None, session_keys={"user": "u"})
    empty = GenerationRequest("r", "m", messages=[], tenant="", session_keys={"user": "u"})
    other = GenerationRequest("r", "m", messages=[], tenant="t", session_keys={"user": "u"})
    assert session_key(anonymous, ["user"]) == session_key(empty, ["user"]) != session_key(other, ["user"])


def test_client_chosen_names_of_any_length_take_a_fixed_size_key():
    """Finding 4 of issue 25: 400 requests with a unique 3 MB `user` took the gateway
    from 374 MB to 1,522 MB; the table kept every name. It keeps 16 bytes of each."""
    table = SessionTable()
    big = "u" * (3 << 20)
    for i in range(400):
        key = session_key(
            GenerationRequest("r", "m", messages=[], tenant="t", session_keys={"user": f"{i}{big}"}), ["user"]
        )
        assert key is not None and len(key) == 32
        table.record(key, "backend-a", now=0)
    assert len(table) == 400
    assert table.bytes_used == 400 * (32 + len("backend-a") + ENTRY_OVERHEAD_BYTES)


def test_the_table_is_bounded_by_its_bytes_as_well_as_its_keys():
    entry = 32 + len("b") + ENTRY_OVERHEAD_BYTES
    table = SessionTable(SessionAffinity(max_table_bytes=entry * 10 + entry // 2))
    for i in range(50):
        table.record(f"{i:032x}", "b", now=i)
    assert len(table) == 10 and table.bytes_used <= table.settings.max_table_bytes
    assert table.owner(f"{49:032x}", now=50) == "b" and table.owner(f"{39:032x}", now=50) is None
    table.record(f"{49:032x}", "b", now=51)  # recorded again: counted once
    assert len(table) == 10 and table.bytes_used == entry * 10


def test_a_session_is_kept_until_idle_strictly_longer_than_the_ttl():
    table = SessionTable(SessionAffinity(ttl_s=10))
    table.record("k", "b1", now=100)
    assert table.owner("k", now=110) == "b1"  # idle exactly the ttl: still held
    assert table.owner("k", now=110.001) is None


def test_the_default_ttl_is_thirty_minutes():
    table = SessionTable()
    table.record("k", "b1", now=0)
    assert table.owner("k", now=1800) == "b1"
    assert table.owner("k", now=1800.5) is None


def test_the_default_capacity_is_one_hundred_thousand_keys():
    table = SessionTable()
    for i in range(100_000):
        table.record(str(i), "b", now=0)
    assert len(table) == 100_000 and table.owner("0", now=0) == "b"
    table.record("one more", "b", now=0)
    assert len(table) == 100_000
    assert table.owner("0", now=0) is None  # the oldest recorded goes first (a read does not refresh it)
    assert table.owner("1", now=0) == "b"


def test_a_table_of_one_key_and_any_positive_ttl_is_allowed():
    table = SessionTable(SessionAffinity(ttl_s=0.5, max_sessions=1))
    table.record("a", "b1", now=0)
    table.record("b", "b2", now=0)
    assert len(table) == 1 and table.owner("b", now=0.5) == "b2"


@pytest.mark.parametrize("ttl_s, capacity, field", [(10, 0, "max_sessions"), (0, 10, "ttl_s"), (-1, 10, "ttl_s")])
def test_an_empty_table_or_a_ttl_that_is_not_positive_is_refused(ttl_s, capacity, field):
    with pytest.raises(ValueError, match=f"(?s)1 validation error.*{field}"):
        SessionTable(SessionAffinity(ttl_s=ttl_s, max_sessions=capacity))


@pytest.mark.parametrize(("room", "held"), [(-1, 9), (0, 10), (1, 10)])
def test_the_table_may_use_exactly_max_table_bytes(room, held):
    entry = 32 + len("b") + ENTRY_OVERHEAD_BYTES
    table = SessionTable(SessionAffinity(max_table_bytes=entry * 10 + room))
    for i in range(10):
        table.record(f"{i:032x}", "b", now=i)
    assert len(table) == held and table.bytes_used == entry * held
    assert table.owner(f"{0:032x}", now=10) == ("b" if held == 10 else None)  # the oldest went first


@pytest.mark.parametrize(("capacity", "held"), [(9, 9), (10, 10), (11, 10)])
def test_the_table_may_hold_exactly_max_sessions_keys(capacity, held):
    table = SessionTable(SessionAffinity(max_sessions=capacity))
    for i in range(10):
        table.record(f"{i:032x}", "b", now=i)
    assert len(table) == held and table.owner(f"{9:032x}", now=10) == "b"
