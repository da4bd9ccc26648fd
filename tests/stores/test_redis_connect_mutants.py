"""What a mutation run of stores/redis_connect.py left open: a script's digest (what
EVALSHA names it by, a script made after import run on a real server), and the address
parser's every refusal with its message; the hash tag; what a reset of the connections drops."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from stores.redis_connect import LuaScript, connect, hash_tag, parse_address


async def test_a_script_is_named_by_the_sha1_of_its_source_and_runs_by_it(redis_server):
    script = LuaScript("return tonumber(ARGV[1]) + 1")
    assert script.sha == hashlib.sha1(b"return tonumber(ARGV[1]) + 1").hexdigest()
    conn = connect(redis_server.url)
    try:
        assert await conn.script(script, [], [41]) == 42  # loaded by EVAL, then run by its digest
        assert await conn.command("SCRIPT", "EXISTS", script.sha) == [1]
        assert await conn.script(script, [], [1]) == 2
    finally:
        await conn.aclose()


@pytest.mark.parametrize(
    ("text", "address"),
    [("redis-1:7000", ("redis-1", 7000)), ("redis-1", ("redis-1", 26379)), ("[::1]:7001", ("::1", 7001))],
)
def test_an_address_is_host_and_port_or_the_default_port(text, address):
    assert parse_address(text, 26379) == address


@pytest.mark.parametrize("text", [":7000", "h:7000/db", "h:7000?x=1", "h:7000#f", "u@h:7000", "u:p@h:7000"])
def test_anything_but_host_and_port_is_refused_saying_so(text):
    with pytest.raises(ValueError) as info:
        parse_address(text, 6379)
    assert str(info.value) == f"{text!r} must be host:port"


@pytest.mark.parametrize("text", ["h:port", "h:99999"])
def test_a_port_that_is_not_one_is_refused_saying_so(text):
    with pytest.raises(ValueError) as info:
        parse_address(text, 6379)
    assert str(info.value) == f"{text!r} has no valid port"


def _clients(listing: bytes, own: int) -> dict[int, str]:
    """CLIENT LIST as {id: the command it runs}, the asking connection left out."""
    out = {}
    for line in listing.decode().splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if int(fields["id"]) != own:
            out[int(fields["id"])] = fields["cmd"]
    return out


async def test_reset_connections_drops_the_idle_ones_and_leaves_a_call_in_flight(redis_server):
    conn, watcher = connect(redis_server.url, timeout_s=5.0), connect(redis_server.url)
    try:
        own = await watcher.command("CLIENT", "ID")
        blocked = asyncio.create_task(conn.command("BLPOP", "k", 3))
        await asyncio.sleep(0.2)
        assert await conn.command("PING")  # a second connection, idle after it
        before = _clients(await watcher.command("CLIENT", "LIST"), own)
        assert sorted(before.values()) == ["blpop", "ping"]
        await conn.reset_connections()
        await asyncio.sleep(0.2)
        after = _clients(await watcher.command("CLIENT", "LIST"), own)
        assert after == {i: c for i, c in before.items() if c == "blpop"}  # the same call, not a retried one
        await watcher.command("LPUSH", "k", "v")
        assert tuple(await blocked) == (b"k", b"v")
    finally:
        await conn.aclose()
        await watcher.aclose()


def test_a_hash_tag_is_prefix_and_tenant_in_braces_each_escaped():
    assert hash_tag("switchyard", "acme") == "{switchyard:acme}"
    # braces would end the tag early; % is escaped too, so that the escape is unambiguous
    assert hash_tag("p%7B", "a}{b%") == "{p%257B:a%7D%7Bb%25}"


async def test_a_loaded_script_runs_by_its_digest_not_its_source(redis_server):
    script = LuaScript("return 7")
    conn = connect(redis_server.url)
    try:
        assert [await conn.script(script, [], []) for _ in range(3)] == [7, 7, 7]
        stats = await conn.command("INFO", "commandstats")
        assert stats["cmdstat_eval"]["calls"] == 1  # the first, after NOSCRIPT
        assert stats["cmdstat_evalsha"]["calls"] == 3
    finally:
        await conn.aclose()


async def test_closing_a_connection_closes_its_pooled_connections(redis_server):
    conn, watcher = connect(redis_server.url), connect(redis_server.url)
    try:
        own = await watcher.command("CLIENT", "ID")
        assert await conn.command("PING")
        assert list(_clients(await watcher.command("CLIENT", "LIST"), own).values()) == ["ping"]
        await conn.aclose()
        await asyncio.sleep(0.2)
        assert _clients(await watcher.command("CLIENT", "LIST"), own) == {}
    finally:
        await watcher.aclose()
