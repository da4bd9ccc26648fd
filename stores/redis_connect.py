"""One client for a Redis deployment, whatever shape production runs it in: one
server (`single`), a Redis Cluster (`cluster`), or a master that Sentinel names
and replaces on failover (`sentinel`). The shared stores (the quota store, the
Responses API's response store) are built on `RedisConnection` and never ask
which shape it is.

What it gives every store, in all three shapes:

* Scripts by digest: `EVALSHA`, and `EVAL` when the server answers NOSCRIPT (a
  failover's new master, a restarted server or `SCRIPT FLUSH` lost its cache);
  `EVAL` caches it there again.
* One exception for "the deployment cannot take this now", `RedisUnavailable`,
  for every error a call can meet: refused or hung connections, a read-only
  replica (a demoted master), a cluster that is down or has a slot without a
  master, a master that refuses writes for lack of replicas
  (`min-replicas-to-write`) or for lack of memory (`maxmemory`, OOM), a server
  busy in a script (BUSY), redirections the cluster client gave up following
  (MOVED storms), and any other error answer (a script meeting a key of the
  wrong type). A store never sees a redis-py exception: each takes its one
  failure path (the quota store's fail policy, the response store's 503).
* A probe, `ping`, that passes only when writes would be taken: every cluster
  primary answers and says the cluster is ok, or the single server / Sentinel's
  master runs a write.
* Sentinel: the sentinels are asked every `MASTER_WATCH_S` whether a failover
  of the master is in progress and which server is master. While one is in
  progress the deployment counts as unavailable: the old master still takes
  writes (Sentinel demotes it only on its next look, about 10 s later) and they
  would be lost. Once Sentinel names the new master, connections to the old one
  are dropped and `on_master_change` is called.
* Bounded waits: each call waits at most `timeout_s` per attempt and is retried
  once on a connection error (on a fresh connection: after a restart or a
  failover every pooled one is dead), never on a timeout (a hung server would
  double the wait); a burst waits up to `pool_wait_s` (by default `timeout_s`) for a
  connection instead of failing (which would look like an outage).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, Unpack
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import (
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from policies.quota_health import stop_task
from policies.redact import redact_url

RedisMode = Literal["single", "cluster", "sentinel"]
# How often Sentinel is asked which server is master (one cheap command to one sentinel).
MASTER_WATCH_S = 0.5
Address = tuple[str, int]

# Every error of a call (the module docstring). RedisClusterException is what the
# cluster client raises when no startup node answers; OSError, a socket's own.
_UNAVAILABLE = (RedisError, RedisClusterException, OSError)


class RedisUnavailable(Exception):
    """The deployment cannot take the call now (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where the deployment is and how to log in; `gateway/config/schema.py` builds it
    from `quota_store`. `url` serves `single` (credentials and TLS may be in it:
    redis://user:pass@host:6379/0, rediss://...); `startup_nodes` seed `cluster`
    (any one that answers finds the rest); `sentinels` and `service_name` find the
    master for `sentinel`. `username`/`password` apply to the data nodes in every
    mode; `sentinel_username`/`sentinel_password` to the sentinels (which usually
    have their own). `tls` is for cluster and sentinel (nodes and sentinels); one
    server takes TLS from its url only (rediss://, `tls_ca_file` beside it), and a
    target that says otherwise is refused (`tls_problem`)."""

    mode: RedisMode = "single"
    url: str = "redis://127.0.0.1:6379/0"
    startup_nodes: tuple[Address, ...] = ()
    sentinels: tuple[Address, ...] = ()
    service_name: str = ""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_ca_file: str | None = None

    def __post_init__(self) -> None:
        problem = tls_problem(self.mode, self.url, self.tls, self.tls_ca_file)
        if problem is not None:
            raise ValueError(problem)

    def describe(self) -> str:
        """For logs: where, never a password."""
        if self.mode == "cluster":
            return "redis cluster " + ",".join(f"{h}:{p}" for h, p in self.startup_nodes)
        if self.mode == "sentinel":
            return f"redis sentinel master {self.service_name!r} via " + ",".join(f"{h}:{p}" for h, p in self.sentinels)
        return redact_url(self.url)


def tls_problem(mode: RedisMode, url: str, tls: bool, tls_ca_file: str | None) -> str | None:
    """Why TLS settings contradict a target (None: they do not). One server's
    connection is made from its url alone, so `tls` there would be ignored on a
    redis:// url (plain text where TLS was asked for) and a CA file needs rediss://
    to be used. `RedisTarget` and the config (gateway/config/redis.py) both ask here."""
    if mode == "single" and (tls or (tls_ca_file and urlsplit(url).scheme != "rediss")):
        return "mode single takes TLS from its url: rediss://host:port/0"
    return None


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A Lua script and its SHA-1 digest (what EVALSHA names it by)."""

    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


# Runs a write that takes memory on the probe key: a replica (a demoted master)
# refuses it with READONLY, a server at `maxmemory` with OOM (`#!lua`: checked
# before it starts, stores/quota_redis.py; a DEL alone would pass).
_PROBE = LuaScript("#!lua\nredis.call('SET', KEYS[1], '1', 'PX', 1000) redis.call('DEL', KEYS[1]) return 1")


def hash_tag(prefix: str, tenant: str) -> str:
    """`{prefix:tenant}`: every key of one tenant carries it, so Redis Cluster
    puts them in one slot and one script may touch them all."""
    return "{" + _escape(prefix) + ":" + _escape(tenant) + "}"


def _escape(text: str) -> str:
    # Braces would end the hash tag early and split one tenant across slots;
    # `%` is escaped too so the escape is unambiguous.
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's master pool with the blocking pool's wait for a free connection,
    and a hook called when Sentinel names a different master (a failover)."""

    on_master_change: Callable[[], None] | None = None

    async def get_master_address(self) -> Any:
        before = self.master_address
        address = await SentinelConnectionPool.get_master_address(self)
        if before is not None and address != before and self.on_master_change is not None:
            self.on_master_change()
        return address


class _Cluster(RedisCluster):
    """redis-py's cluster client, with three of its behaviours worked around.

    * It retries a call after reloading the topology (a failover moved the slot);
      here never after a timeout, so a hung node costs one timeout, not two.
    * A command that starts while the slot map is not loaded yet (the first calls,
      or the calls after a reload) is routed as if it had no key, to any node, and
      answered MOVED; every few MOVED it closes every connection to reload the map
      (`reinitialize_steps`). `RedisConnection` loads the map before each call, and
      a MOVED here only moves its slot (0: never a full reload for it).
    * Closing every connection (it also does so on CLUSTERDOWN, which every node
      answers while a failed master has not been replaced yet) breaks the calls
      that were opening one at that moment with AttributeError: `RedisConnection`
      counts that as the deployment being unavailable, which is what happened.
    """

    ERRORS_ALLOW_RETRY = (RedisConnectionError, ClusterDownError, SlotNotCoveredError)  # type: ignore[assignment]


class ConnectionOptions(TypedDict, total=False):
    """RedisConnection's options, as the stores take them through to it."""

    timeout_s: float
    max_connections: int
    pool_wait_s: float
    on_master_change: Callable[[], None] | None


def connect(target: str | RedisTarget, **options: Unpack[ConnectionOptions]) -> RedisConnection:
    """A connection to a redis:// URL (one server) or to any RedisTarget."""
    return RedisConnection(RedisTarget(url=target) if isinstance(target, str) else target, **options)


class RedisConnection:
    """One client for `target` (see the module docstring)."""

    def __init__(
        self,
        target: RedisTarget,
        *,
        timeout_s: float = 1.0,
        max_connections: int = 64,
        pool_wait_s: float | None = None,
        on_master_change: Callable[[], None] | None = None,
    ) -> None:
        """`pool_wait_s`: how long a call waits for a free connection, by default
        `timeout_s`: the store's one limit then bounds that wait as it bounds the call.
        `on_master_change`: called when Sentinel names a new master, so a store
        can restore what a failover may have lost without waiting for an outage."""
        self.target = target
        self.pool_wait_s = pool_wait_s = timeout_s if pool_wait_s is None else pool_wait_s
        retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
        common: dict[str, Any] = {
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
            **_credentials(target.username, target.password),
        }
        if target.tls:
            common.update(ssl=True, ssl_ca_certs=target.tls_ca_file)
        # The cluster client opens connections per node and raises (rather than
        # waits) when a node's are all busy: calls wait here instead, and at most
        # `max_connections` run at once, so no node's limit is ever reached.
        self._calls: asyncio.Semaphore | None = None
        self._sentinel: Sentinel | None = None
        self._master_pool: _BlockingSentinelPool | None = None
        self._watch: asyncio.Task[None] | None = None
        self._failing_over = False  # what the sentinels said at the last look
        self._pool: BlockingConnectionPool | None = None
        self.client: aioredis.Redis | RedisCluster
        if target.mode == "cluster":
            self._calls = asyncio.Semaphore(max_connections)
            self.client = _Cluster(
                startup_nodes=[ClusterNode(h, p) for h, p in target.startup_nodes],
                max_connections=max_connections,
                retry=Retry(NoBackoff(), 1),
                reinitialize_steps=0,
                **common,
            )
        elif target.mode == "sentinel":
            # the sentinels' own clients too retry once, at once: redis-py's default (three
            # retries with backoff) made each call wait about 7 s while no sentinel answered;
            # a Retry of their own (one shared with the master's pool starved it of connections)
            sentinel_kwargs: dict[str, Any] = {
                "socket_timeout": timeout_s,
                "socket_connect_timeout": timeout_s,
                "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                **_credentials(target.sentinel_username, target.sentinel_password),
            }
            if target.tls:
                sentinel_kwargs.update(ssl=True, ssl_ca_certs=target.tls_ca_file)
            self._sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs, **common)
            master = self._sentinel.master_for(
                target.service_name,
                connection_pool_class=_BlockingSentinelPool,
                max_connections=max_connections,
                timeout=pool_wait_s,
                retry=retry,
            )
            self.client = master
            pool = master.connection_pool
            assert isinstance(pool, _BlockingSentinelPool)
            pool.on_master_change = on_master_change
            self._pool = self._master_pool = pool
        else:
            if target.tls_ca_file:
                common["ssl_ca_certs"] = target.tls_ca_file
            self._pool = BlockingConnectionPool.from_url(
                target.url, max_connections=max_connections, timeout=pool_wait_s, retry=retry, **common
            )
            self.client = aioredis.Redis(connection_pool=self._pool)

    def describe(self) -> str:
        return self.target.describe()

    async def script(self, script: LuaScript, keys: Sequence[str], args: Sequence[str | bytes | int]) -> Any:
        """Run `script` on the node holding `keys` (one slot in a cluster)."""

        async def run() -> Any:
            try:
                return await self.client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:
                return await self.client.eval(script.source, len(keys), *keys, *args)

        return await self._call(run)

    async def command(self, *args: str | bytes | int) -> Any:
        """One command on one key (a cluster sends it to the key's node)."""
        return await self._call(lambda: self.client.execute_command(*args))

    async def ping(self, probe_key: str) -> None:
        """Raise RedisUnavailable unless writes would be taken now."""
        cluster = self.client
        if isinstance(cluster, RedisCluster):
            await self._call(lambda: _cluster_serves(cluster))
        else:
            await self.script(_PROBE, [probe_key], [])

    async def reset_connections(self) -> None:
        """Drop idle connections (and a cluster's topology), so the next call
        opens fresh ones to whoever is master now."""
        if isinstance(self.client, RedisCluster):
            await self.client.aclose()  # the next call reloads the slot map
        elif self._pool is not None:
            await self._pool.disconnect(inuse_connections=False)

    async def aclose(self) -> None:
        if self._watch is not None:
            await stop_task(self._watch)
        await self.client.aclose()
        if self._pool is not None:
            await self._pool.disconnect()
        if self._sentinel is not None:
            await self._sentinel.aclose()

    async def _call(self, call: Callable[[], Awaitable[Any]]) -> Any:
        if self._master_pool is not None and self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_master(), name="redis-master-watch")
        if self._failing_over:
            raise RedisUnavailable(f"Sentinel is failing over master {self.target.service_name!r}")
        cluster = self.client if isinstance(self.client, RedisCluster) else None
        try:
            async with self._slot():
                if cluster is not None:
                    await cluster.initialize()  # no-op once the slot map is loaded
                return await call()
        except _UNAVAILABLE as exc:
            raise RedisUnavailable(str(exc) or type(exc).__name__) from exc
        except AttributeError as exc:
            if cluster is None:
                raise
            # A connection closed under the call by a topology reload (see _Cluster).
            raise RedisUnavailable(f"connection closed by a cluster topology reload ({exc})") from exc

    async def _watch_master(self) -> None:
        """Ask the sentinels on a schedule whether they are failing the master over,
        and which server is master: the pool drops its idle connections to one that
        no longer is (and calls on_master_change); those in use, when they come back."""
        assert self._sentinel is not None and self._master_pool is not None
        while True:
            await asyncio.sleep(MASTER_WATCH_S)
            states = await asyncio.gather(
                *(s.sentinel_master(self.target.service_name) for s in self._sentinel.sentinels),
                return_exceptions=True,
            )
            self._failing_over = any(
                isinstance(state, dict) and "failover_in_progress" in _flags(state) for state in states
            )
            if self._failing_over:
                continue
            try:
                await self._master_pool.get_master_address()
            except _UNAVAILABLE:
                continue  # no sentinel answers now: the calls find out for themselves

    def _slot(self) -> AbstractAsyncContextManager[object]:
        if self._calls is None:
            return nullcontext()
        return _acquire(self._calls, self.pool_wait_s)


async def _cluster_serves(cluster: RedisCluster) -> None:
    """Every primary of the slot map answers and says the cluster is ok: during a
    failover a dead master is still in the map until its replica takes over, and
    nodes answer CLUSTERDOWN until they agree it has."""
    await cluster.initialize()
    for node in cluster.get_primaries():
        state = (await cluster.execute_command("CLUSTER INFO", target_nodes=node)).get("cluster_state")
        if state != "ok":
            raise ClusterDownError(f"{node.name} says the cluster is {state}")


@asynccontextmanager
async def _acquire(calls: asyncio.Semaphore, wait_s: float) -> AsyncIterator[None]:
    try:
        async with asyncio.timeout(wait_s):
            await calls.acquire()
    except TimeoutError:
        raise RedisConnectionError("No connection available.") from None
    try:
        yield
    finally:
        calls.release()


def _flags(state: dict[str, Any]) -> set[str]:
    flags = state.get("flags", "")
    return set(flags.split(",")) if isinstance(flags, str) else set(flags)


def _credentials(username: str | None, password: str | None) -> dict[str, str]:
    out = {}
    if username:
        out["username"] = username
    if password:
        out["password"] = password
    return out


def parse_address(text: str, default_port: int) -> Address:
    """`host:port` (or `[v6]:port`, or a bare host) -> (host, port); ValueError says why not."""
    parts = urlsplit(f"//{text}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{text!r} has no valid port") from None
    if not parts.hostname or parts.path or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{text!r} must be host:port")
    return parts.hostname, port or default_port
