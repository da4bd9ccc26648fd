"""Two gateway processes sharing one Redis deployment (a Cluster or a Sentinel
set, tests/redis_ha/deployments.py) in front of the fast upstream simulator, and
steady traffic against them with every answer recorded. Real processes on
loopback (tests/procs.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from policies.auth import hash_key
from stores.redis_connect import hash_tag
from tests.procs import Process, openai_backend_config, start_gateway, start_upstream
from tests.redis_ha.deployments import SERVICE, ClusterDeployment, SentinelDeployment

# The tenants every fleet knows, their limits, and the key each one's client sends.
TENANTS = {
    "exact": {"requests_per_minute": 60},
    "conc": {"max_concurrent": 4},
    "steady": {"requests_per_minute": 100, "max_concurrent": 4},
}
# Each call's limit: generous, since a call slower than it (a loaded 2-core machine runs
# every process here) is a 503 where the tests assert none, and no outage here hangs a
# call (a killed node refuses, a failover is seen). A short lease TTL: a heartbeat every second.
STORE_TIMEOUT_S = 2.0
LEASE_TTL_S = 3.0


def key_of(tenant: str) -> str:
    return f"sk-sy-ha-{tenant}"


def quota_store(deployment: ClusterDeployment | SentinelDeployment, key_prefix: str) -> dict:
    if isinstance(deployment, ClusterDeployment):
        where: dict = {"mode": "cluster", "startup_nodes": deployment.startup_nodes}
    else:
        where = {"mode": "sentinel", "sentinels": deployment.sentinels, "service_name": SERVICE}
    return {
        "kind": "redis",
        **where,
        "key_prefix": key_prefix,
        "timeout_s": STORE_TIMEOUT_S,
        "lease_ttl_s": LEASE_TTL_S,
        # Exactness is judged with fail_closed: fail_open admits on per-replica limits
        # while the store is away, by design.
        "on_unavailable": "fail_closed",
    }


class Fleet:
    def __init__(self, tmp: Path, deployment: ClusterDeployment | SentinelDeployment) -> None:
        self.deployment = deployment
        self.key_prefix = f"ha{uuid.uuid4().hex[:8]}"
        self.upstream: Process | None = None
        self.gateways: list[Process] = []
        try:
            self.upstream = start_upstream(tmp)
            config = openai_backend_config(self.upstream)
            config.update(
                {
                    "auth": {
                        "mode": "keys",
                        "api_keys": [{"sha256": hash_key(key_of(t)), "tenant": t} for t in TENANTS],
                    },
                    "quota_store": quota_store(deployment, self.key_prefix),
                    "tenants": TENANTS,
                    "access_log": False,
                }
            )
            self.gateways = [start_gateway(tmp, config) for _ in range(2)]
        except BaseException:
            self.stop()
            raise

    def lease_key(self, tenant: str) -> str:
        """The tenant's lease key (its slot is the one all its scripts touch)."""
        return f"{hash_tag(self.key_prefix, tenant)}:t:lease"

    async def upstream_stats(self, client: httpx.AsyncClient, reset: bool = False) -> dict:
        assert self.upstream is not None
        stats = (await client.get(self.upstream.url + "/_sim/stats")).json()
        if reset:
            await client.post(self.upstream.url + "/_sim/reset")
        return stats

    def stop(self) -> None:
        for p in [*self.gateways, self.upstream]:
            if p is not None:
                p.stop()


@dataclass
class Answer:
    gateway: int
    sent: float
    took_s: float
    status: int
    code: str | None


@dataclass
class Traffic:
    """About `rate` requests per second in all, alternating between the gateways,
    sent on schedule (not after the previous answer), each taking `upstream_ms` at
    the upstream, until stopped."""

    fleet: Fleet
    tenant: str
    rate: float = 20.0
    upstream_ms: float = 150.0
    answers: list[Answer] = field(default_factory=list)

    async def __aenter__(self) -> Traffic:
        self._client = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=200))
        self._task = asyncio.create_task(self._drive())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._client.aclose()

    async def _drive(self) -> None:
        inflight: set[asyncio.Task[None]] = set()
        n = 0
        try:
            while True:
                task = asyncio.create_task(self._one(n % len(self.fleet.gateways)))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                n += 1
                await asyncio.sleep(1 / self.rate)
        finally:
            await asyncio.gather(*inflight, return_exceptions=True)

    async def _one(self, gateway: int) -> None:
        start = time.monotonic()
        r = await self._client.post(
            self.fleet.gateways[gateway].url + "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "sim": {"ttft_ms": self.upstream_ms},
            },
            headers={"authorization": f"Bearer {key_of(self.tenant)}"},
        )
        code = r.json().get("error", {}).get("code") if r.status_code != 200 else None
        self.answers.append(Answer(gateway, start, time.monotonic() - start, r.status_code, code))

    def open_during(self, start: float, end: float) -> list[Answer]:
        """The requests sent by `end` and answered from `start` on: those whose charge
        (made between sending and answering) may fall in [start, end]."""
        return [a for a in self.answers if a.sent <= end and a.sent + a.took_s >= start]
