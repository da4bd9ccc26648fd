"""Session affinity at its edges: keys without a tenant, the table's documented
defaults (30 minutes, 100 000 keys), the ttl boundary, and the refused sizes."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest
from policies.session import SessionAffinity, SessionTable, session_key


def test_a_request_without_a_tenant_keys_its_session_by_the_value_alone():
    anonymous = GenerationRequest("r", "m", messages=[], tenant=None, session_keys={"user": "u"})
    assert session_key(anonymous, ["user"]) == "\x00u"


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
