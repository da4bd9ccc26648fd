"""stores/redis_connect.py: what each deployment shape's client is built with, read off the
built client before it connects (building one opens no connection): the call and connect
timeouts, the one retry of a connection error, the pool's size and wait, TLS and its CA,
the data nodes' and the sentinels' credentials apart, the cluster's slot map never fully
reloaded by MOVED. The shapes' behaviour on real deployments is tests/redis_ha/'s."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio.connection import SSLConnection
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from processes import free_port
from stores.redis_connect import RedisConnection, RedisTarget, RedisUnavailable, _BlockingSentinelPool, _Cluster, _flags

NODES = (("10.0.0.1", 7000), ("10.0.0.2", 7001))
SENTINELS = (("10.0.0.3", 26379), ("10.0.0.4", 26380))


def _one_retry_of_connection_errors(retry: object, supported: tuple[type, ...] | None) -> None:
    assert isinstance(retry._backoff, NoBackoff) and retry._retries == 1  # type: ignore[attr-defined]
    if supported is not None:
        assert tuple(retry._supported_errors) == supported  # type: ignore[attr-defined]


def test_a_target_describes_a_cluster_and_a_sentinel_set_by_their_addresses():
    assert RedisTarget(mode="cluster", startup_nodes=NODES).describe() == "redis cluster 10.0.0.1:7000,10.0.0.2:7001"
    sentinel = RedisTarget(mode="sentinel", sentinels=SENTINELS, service_name="main", password="pw")
    assert sentinel.describe() == "redis sentinel master 'main' via 10.0.0.3:26379,10.0.0.4:26380"


async def test_a_cluster_client_is_built_with_every_option():
    target = RedisTarget(mode="cluster", startup_nodes=NODES, username="u", password="p", tls=True, tls_ca_file="/ca")
    conn = RedisConnection(target, timeout_s=0.7, max_connections=5)
    client = conn.client
    assert isinstance(client, _Cluster) and client.reinitialize_steps == 0
    _one_retry_of_connection_errors(client.retry, None)
    assert sorted(client.nodes_manager.startup_nodes) == ["10.0.0.1:7000", "10.0.0.2:7001"]
    kwargs = client.connection_kwargs
    assert (kwargs["max_connections"], kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (5, 0.7, 0.7)
    assert (kwargs["username"], kwargs["password"], kwargs["ssl_ca_certs"]) == ("u", "p", "/ca")
    assert kwargs["connection_class"] is SSLConnection
    assert isinstance(conn._calls, asyncio.Semaphore) and conn._calls._value == 5
    assert conn._pool is None and conn._sentinel is None and conn._master_pool is None
    assert conn.pool_wait_s == 0.7 and conn.describe() == target.describe()


async def test_a_sentinel_client_logs_in_to_the_sentinels_and_the_master_apart():
    target = RedisTarget(
        mode="sentinel",
        sentinels=SENTINELS,
        service_name="main",
        username="u",
        password="p",
        sentinel_username="su",
        sentinel_password="sp",
        tls=True,
        tls_ca_file="/ca",
    )
    conn = RedisConnection(target, timeout_s=0.7, max_connections=5, pool_wait_s=0.3, on_master_change=lambda: None)
    sentinel = conn._sentinel
    assert sentinel is not None
    timeouts = {"socket_timeout": 0.7, "socket_connect_timeout": 0.7}
    tls = {"ssl": True, "ssl_ca_certs": "/ca"}
    sentinel_kwargs = dict(sentinel.sentinel_kwargs)
    _one_retry_of_connection_errors(sentinel_kwargs.pop("retry"), (RedisConnectionError,))
    assert sentinel_kwargs == timeouts | {"username": "su", "password": "sp"} | tls
    assert sentinel.connection_kwargs == timeouts | {"username": "u", "password": "p"} | tls
    assert [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in sentinel.sentinels
    ] == list(SENTINELS)
    pool = conn.client.connection_pool
    assert isinstance(pool, _BlockingSentinelPool) and pool is conn._pool and pool is conn._master_pool
    assert (pool.service_name, pool.max_connections, pool.timeout) == ("main", 5, 0.3)
    _one_retry_of_connection_errors(pool.connection_kwargs["retry"], (RedisConnectionError,))
    assert pool.on_master_change is not None and conn._calls is None and not conn._failing_over
    await conn.aclose()


def test_a_sentinel_without_its_own_login_or_tls_sends_none():
    conn = RedisConnection(RedisTarget(mode="sentinel", sentinels=SENTINELS, service_name="main", password="p"))
    assert conn._sentinel is not None
    assert conn._sentinel.sentinel_kwargs.keys() == {"socket_timeout", "socket_connect_timeout", "retry"}
    assert (
        conn._sentinel.sentinel_kwargs["socket_timeout"]
        == conn._sentinel.sentinel_kwargs["socket_connect_timeout"]
        == 1.0
    )
    assert conn.client.connection_pool.max_connections == 64 and conn.client.connection_pool.timeout == 1.0


@pytest.mark.parametrize(
    ("url", "tls", "ca"),
    [
        ("redis://127.0.0.1:1/0", True, None),  # was built and connected in plain text
        ("rediss://127.0.0.1:1/0", True, None),  # TLS said twice: the url is the one place
        ("redis://127.0.0.1:1/0", False, "/ca"),  # a CA for a connection that is not TLS
        ("unix:///tmp/redis.sock", False, "/ca"),
    ],
)
def test_one_server_built_in_code_takes_tls_from_its_url_only(url, tls, ca):
    with pytest.raises(ValueError) as info:
        RedisTarget(url=url, tls=tls, tls_ca_file=ca)
    assert str(info.value) == "mode single takes TLS from its url: rediss://host:port/0"
    assert RedisTarget(url="rediss://127.0.0.1:1/0", tls_ca_file="/ca").tls_ca_file == "/ca"
    assert RedisTarget(mode="cluster", startup_nodes=NODES, tls=True).tls  # the url is not theirs
    assert RedisTarget(mode="sentinel", sentinels=SENTINELS, service_name="m", tls_ca_file="/ca").tls_ca_file


async def test_one_servers_pool_waits_as_long_as_a_call_and_retries_a_connection_error_once():
    target = RedisTarget(url="rediss://127.0.0.1:1/0", username="u", password="p", tls_ca_file="/ca")
    conn = RedisConnection(target, timeout_s=0.7)
    pool = conn._pool
    assert pool is not None and (pool.max_connections, pool.timeout) == (64, 0.7)
    kwargs = pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.7, 0.7)
    assert (kwargs["username"], kwargs["password"], kwargs["ssl_ca_certs"]) == ("u", "p", "/ca")
    _one_retry_of_connection_errors(kwargs["retry"], (RedisConnectionError,))
    assert conn._calls is None and conn._master_pool is None
    await conn.aclose()


async def test_a_sentinel_connection_starts_one_master_watch_on_its_first_call():
    target = RedisTarget(mode="sentinel", sentinels=(("127.0.0.1", free_port()),), service_name="main")
    conn = RedisConnection(target, timeout_s=0.2)
    try:
        assert conn._watch is None  # nothing runs before the first call
        with pytest.raises(RedisUnavailable):
            await conn.command("PING")  # no sentinel answers: refused, a real connection error
        watch = conn._watch
        assert isinstance(watch, asyncio.Task) and watch.get_name() == "redis-master-watch" and not watch.done()
        with pytest.raises(RedisUnavailable):
            await conn.command("PING")
        assert conn._watch is watch
        conn._failing_over = True  # what the watch sets while Sentinel fails the master over
        with pytest.raises(RedisUnavailable) as info:
            await conn.command("PING")
        assert str(info.value) == "Sentinel is failing over master 'main'"
    finally:
        await conn.aclose()
    assert watch.done()


async def test_one_server_never_starts_a_master_watch():
    conn = RedisConnection(RedisTarget(url=f"redis://127.0.0.1:{free_port()}/0"), timeout_s=0.2)
    with pytest.raises(RedisUnavailable):
        await conn.command("PING")
    assert conn._watch is None
    await conn.aclose()


async def test_an_error_without_a_message_is_named_by_its_type_and_a_bug_is_not_an_outage():
    conn = RedisConnection(RedisTarget(url=f"redis://127.0.0.1:{free_port()}/0"))

    async def fails(exc: Exception) -> None:
        raise exc

    try:
        with pytest.raises(RedisUnavailable) as info:
            await conn._call(lambda: fails(RedisError()))
        assert str(info.value) == "RedisError"
        with pytest.raises(AttributeError):  # only a cluster's topology reload is taken for an outage
            await conn._call(lambda: fails(AttributeError("bug")))
    finally:
        await conn.aclose()


async def test_a_cluster_call_waits_for_a_free_slot_as_long_as_the_pool_wait():
    target = RedisTarget(mode="cluster", startup_nodes=(("127.0.0.1", free_port()),))
    conn = RedisConnection(target, timeout_s=5.0, max_connections=1, pool_wait_s=0.2)
    try:
        async with conn._slot():  # the one slot taken
            started = asyncio.get_running_loop().time()
            with pytest.raises(RedisUnavailable, match="No connection available"):
                await asyncio.wait_for(conn.command("PING"), 3.0)
            assert 0.15 < asyncio.get_running_loop().time() - started < 2.0
        assert conn._calls is not None and conn._calls._value == 1  # given back
    finally:
        await conn.aclose()


def test_a_sentinels_flags_are_read_from_its_comma_list_or_its_list():
    assert _flags({"flags": "master,failover_in_progress"}) == {"master", "failover_in_progress"}
    assert _flags({"flags": ["master", "s_down"]}) == {"master", "s_down"}
    assert _flags({"name": "main"}) - {""} == set()  # no flags: none set
