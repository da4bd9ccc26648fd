"""A small fleet for the chaos tests: one redis-server, the fast OpenAI upstream
simulator, and one gateway per fail policy sharing that Redis; steady traffic
against the gateways, and reading their metrics. All real processes on loopback
(tests/procs.py); Redis is paused with SIGSTOP, or killed and started again on
its port."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from policies.auth import hash_key
from tests.procs import Process, metric_samples, openai_backend_config, start_gateway, start_redis, start_upstream

KEY = "sk-sy-chaos-tenant-key"
# A short call timeout keeps a hung Redis's cost small; the default is 1 s.
STORE_TIMEOUT_S = 0.3
POLICIES = ("fail_open", "fail_closed")


def redis_port(redis: Process) -> int:
    return int(redis.url.rsplit(":", 1)[1].split("/")[0])


class Fleet:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.redis = start_redis(tmp)
        self.upstream: Process | None = None
        self.gateways: dict[str, Process] = {}
        try:
            self.upstream = start_upstream(tmp)
            for policy in POLICIES:
                self.gateways[policy] = start_gateway(tmp, self.config(policy))
        except BaseException:
            self.stop()
            raise

    def config(self, policy: str) -> dict:
        assert self.upstream is not None
        cfg = openai_backend_config(self.upstream)
        cfg.update(
            {
                "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key(KEY), "tenant": "chaos"}]},
                "quota_store": {
                    "kind": "redis",
                    "url": self.redis.url,
                    "on_unavailable": policy,
                    "timeout_s": STORE_TIMEOUT_S,
                    "key_prefix": f"chaos-{policy}",
                },
                "tenants": {
                    "chaos": {"requests_per_minute": 100_000, "tokens_per_minute": 10**8, "max_concurrent": 200}
                },
                "access_log": False,
            }
        )
        return cfg

    @contextmanager
    def redis_paused(self):
        """SIGSTOP: Redis keeps its connections and answers nothing until SIGCONT."""
        os.kill(self.redis.child.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.redis.child.pid, signal.SIGCONT)

    def kill_redis(self) -> None:
        self.redis.kill()

    def restart_redis(self) -> None:
        """A new, empty redis-server on the port of the killed one."""
        self.redis = start_redis(self.tmp / f"restarted-{time.monotonic_ns()}", port=redis_port(self.redis))

    def stop(self) -> None:
        for p in [*self.gateways.values(), self.upstream, self.redis]:
            if p is not None:
                p.stop()


async def scrape(client: httpx.AsyncClient, gateway: Process) -> dict[str, float]:
    """The gateway's /metrics as {sample with labels: value}."""
    return metric_samples((await client.get(gateway.url + "/metrics")).text)


@dataclass
class Answer:
    gateway: str
    at: float
    took_s: float
    status: int
    code: str | None


@dataclass
class Traffic:
    """About `rate` requests per second to each gateway until stopped, each
    answer recorded; requests are sent on schedule, not after the previous answer."""

    fleet: Fleet
    rate: float = 10.0
    answers: list[Answer] = field(default_factory=list)

    async def __aenter__(self) -> Traffic:
        self._client = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=200))
        self._tasks = [asyncio.create_task(self._drive(name, gw)) for name, gw in self.fleet.gateways.items()]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()

    async def _drive(self, name: str, gateway: Process) -> None:
        inflight: set[asyncio.Task[None]] = set()
        try:
            while True:
                task = asyncio.create_task(self._one(name, gateway))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                await asyncio.sleep(1 / self.rate)
        finally:
            await asyncio.gather(*inflight, return_exceptions=True)

    async def _one(self, name: str, gateway: Process) -> None:
        start = time.monotonic()
        r = await self._client.post(
            gateway.url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            headers={"authorization": f"Bearer {KEY}"},
        )
        code = r.json().get("error", {}).get("code") if r.status_code != 200 else None
        self.answers.append(Answer(name, start, time.monotonic() - start, r.status_code, code))

    def of(self, gateway: str, since: float = 0.0) -> list[Answer]:
        return [a for a in self.answers if a.gateway == gateway and a.at >= since]


async def wait_for_gauge(client: httpx.AsyncClient, gateway: Process, name: str, value: float, bound_s: float) -> float:
    """Seconds until the gateway's gauge `name` reads `value`, polled every 20 ms;
    fails after `bound_s`."""
    start = time.monotonic()
    while True:
        if (await scrape(client, gateway)).get(name) == value:
            return time.monotonic() - start
        assert time.monotonic() - start < bound_s, f"{name} did not reach {value} within {bound_s} s"
        await asyncio.sleep(0.02)
