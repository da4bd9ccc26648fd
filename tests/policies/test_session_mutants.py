"""What a mutation run of policies/session.py left open: the key's documented digest (a
request without a tenant hashed as the empty tenant, never as some other name), a value
no UTF-8 codec would take (a lone surrogate, which a JSON body may carry), and the byte
bound's floor: the newest entry stays even when it alone is over the limit."""

from __future__ import annotations

import hashlib

from adapters.base import GenerationRequest
from policies.session import ENTRY_OVERHEAD_BYTES, SessionAffinity, SessionTable, session_key


def _key(tenant: str | None, value: str) -> str | None:
    return session_key(GenerationRequest("r", "m", messages=[], tenant=tenant, session_keys={"user": value}), ["user"])


def test_the_key_is_sixteen_bytes_of_sha256_over_the_tenant_and_the_value():
    assert _key("acme", "conv-1") == hashlib.sha256(b"acme\x00conv-1").digest()[:16].hex()
    assert _key(None, "conv-1") == hashlib.sha256(b"\x00conv-1").digest()[:16].hex()


def test_a_value_with_a_lone_surrogate_still_takes_a_key():
    """json.loads('"\\ud800"') is a str that strict UTF-8 refuses to encode."""
    key = _key("acme", "conv-\ud800")
    assert key == hashlib.sha256("acme\x00conv-\ud800".encode("utf-8", "surrogatepass")).digest()[:16].hex()
    assert key != _key("acme", "conv-\ud801")


def test_one_entry_over_the_byte_limit_alone_is_kept():
    table = SessionTable(SessionAffinity(max_table_bytes=1024))
    table.record("k" * 32, "b" * 2000, now=0)
    assert len(table) == 1 and table.owner("k" * 32, now=0) == "b" * 2000


def test_two_entries_over_the_byte_limit_keep_only_the_newest():
    backend = "b" * (1024 - 32 - ENTRY_OVERHEAD_BYTES)  # one entry is exactly the limit
    table = SessionTable(SessionAffinity(max_table_bytes=1024))
    table.record("a" * 32, backend, now=0)
    assert len(table) == 1 and table.bytes_used == 1024  # at the limit: kept
    table.record("c" * 32, backend, now=1)
    assert len(table) == 1 and table.owner("c" * 32, now=1) == backend and table.owner("a" * 32, now=1) is None
