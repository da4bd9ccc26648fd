"""Session affinity: which key names a conversation, and the table of owners."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest
from policies.session import ENTRY_OVERHEAD_BYTES, SESSION_SOURCES, SessionAffinity, SessionTable, session_key


def req(tenant="t", **keys) -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": "x"}], tenant=tenant, session_keys=keys)


def named(value: str, tenant: str = "t") -> str | None:
    return session_key(req(tenant, user=value), ["user"])


def test_a_session_idle_past_the_ttl_is_dropped_with_its_bytes():
    """First in this file on purpose: a mutant of the drop that keeps an entry fails here at
    once, where the eviction tests would loop until their timeout."""
    table = SessionTable(SessionAffinity(ttl_s=10))
    table.record("k", "b1", now=0)
    table.record("k2", "b2", now=5)
    assert table.owner("k", now=10.5) is None
    assert len(table) == 1 and table.bytes_used == len("k2") + len("b2") + ENTRY_OVERHEAD_BYTES
    assert table.owner("k", now=10.5) is None and table.owner("k2", now=10.5) == "b2"


def test_the_first_configured_source_present_names_the_session():
    both = req(user="alice", prompt_cache_key="conv-7")
    assert session_key(both, SESSION_SOURCES) == named("conv-7")
    assert session_key(both, ["user", "prompt_cache_key"]) == named("alice")
    assert session_key(req(user="alice"), ["prompt_cache_key"]) is None
    assert session_key(req(), SESSION_SOURCES) is None
    assert session_key(req(**{"x-session-id": "s1", "user": "bob"}), SESSION_SOURCES) == named("s1")


def test_sessions_are_per_tenant():
    assert session_key(req("a", user="u"), ["user"]) != session_key(req("b", user="u"), ["user"])


def test_the_table_remembers_the_last_backend_until_the_ttl():
    table = SessionTable(SessionAffinity(ttl_s=60))
    table.record("k", "b1", now=0)
    assert table.owner("k", now=59) == "b1"
    table.record("k", "b2", now=59)  # the conversation moved (its backend was saturated)
    assert table.owner("k", now=118) == "b2"
    assert table.owner("k", now=120) is None and len(table) == 0
    assert table.owner("unknown", now=0) is None


def test_the_table_is_bounded_least_recently_used_first():
    table = SessionTable(SessionAffinity(max_sessions=2))
    table.record("a", "b1", 0)
    table.record("b", "b1", 1)
    table.record("a", "b2", 2)  # a is now the most recent
    table.record("c", "b3", 3)
    assert (table.owner("a", 4), table.owner("b", 4), table.owner("c", 4)) == ("b2", None, "b3")
    with pytest.raises(ValueError):
        SessionTable(SessionAffinity(max_sessions=0))
